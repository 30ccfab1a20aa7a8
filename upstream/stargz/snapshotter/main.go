// Command gpucaas-stargz-grpc serves the stargz snapshotter (github.com/containerd/stargz-snapshotter,
// the library of the module pinned in go.mod) to containerd as a proxy snapshotter plugin, over
// gRPC on a unix socket. Layers in the eStargz format are mounted over FUSE and fetched from
// the registry as they are read; other layers are left to containerd, which pulls them whole.
//
// The module's own command (its cmd module) is not served by the Go module proxy, so this is
// the part of it a node here needs: the snapshotter service and, with cri_keychain enabled in
// the configuration, the CRI image service proxy that the kubelet is pointed at
// (--image-service-endpoint). The proxy passes every call on to containerd's CRI and keeps the
// credentials of each PullImage, so that a lazily fetched layer of a private image is fetched
// with the pull's own credentials and nothing else.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/v2/contrib/snapshotservice"
	"github.com/containerd/log"
	"github.com/containerd/stargz-snapshotter/service"
	"github.com/containerd/stargz-snapshotter/service/keychain/cri"
	"github.com/containerd/stargz-snapshotter/service/resolver"
	"github.com/pelletier/go-toml/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtime "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func main() {
	address := flag.String("address", "", "the unix socket containerd's proxy plugin dials")
	root := flag.String("root", "", "the snapshotter's state: its snapshots, the fetched chunks' cache")
	configPath := flag.String("config", "", "the snapshotter's TOML configuration (the module's service.Config)")
	flag.Parse()
	if err := run(*address, *root, *configPath); err != nil {
		fmt.Fprintf(os.Stderr, "gpucaas-stargz-grpc: %v\n", err)
		os.Exit(1)
	}
}

func listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return net.Listen("unix", path)
}

func run(address, root, configPath string) error {
	if address == "" || root == "" || configPath == "" {
		return errors.New("-address, -root and -config are all needed")
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	var config service.Config
	raw, err := os.ReadFile(configPath)
	if err != nil {
		return err
	}
	if err := toml.Unmarshal(raw, &config); err != nil {
		return fmt.Errorf("%s: %w", configPath, err)
	}
	servers := []*grpc.Server{}
	var creds []resolver.Credential
	if kc := config.CRIKeychainConfig; kc.EnableKeychain {
		if kc.ImageServicePath == "" || kc.ListenPath == "" {
			return errors.New("cri_keychain needs image_service_path (containerd's socket) and listen_path")
		}
		backend := kc.ImageServicePath
		connect := func() (runtime.ImageServiceClient, error) {
			conn, err := grpc.NewClient("unix://"+backend, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return nil, err
			}
			return runtime.NewImageServiceClient(conn), nil
		}
		credential, proxy := cri.NewCRIKeychain(ctx, connect)
		creds = append(creds, credential)
		l, err := listen(kc.ListenPath)
		if err != nil {
			return err
		}
		s := grpc.NewServer()
		runtime.RegisterImageServiceServer(s, proxy)
		servers = append(servers, s)
		go func() { _ = s.Serve(l) }()
	}
	snapshotter, err := service.NewStargzSnapshotterService(ctx, root, &config, service.WithCredsFuncs(creds...))
	if err != nil {
		return err
	}
	l, err := listen(address)
	if err != nil {
		return err
	}
	s := grpc.NewServer()
	snapshotsapi.RegisterSnapshotsServer(s, snapshotservice.FromSnapshotter(snapshotter))
	servers = append(servers, s)
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	log.G(ctx).Infof("serving the stargz snapshotter on %s", address)
	select {
	case <-ctx.Done():
	case err = <-served:
	}
	for _, s := range servers {
		s.Stop()
	}
	// the FUSE mounts go with the snapshotter: containerd sees the snapshots again at the next start
	if cerr := snapshotter.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}
