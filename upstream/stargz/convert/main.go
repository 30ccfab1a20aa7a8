// Command gpucaas-estargz writes an eStargz copy of an image held in an OCI image layout, into
// the same layout under another tag: each layer rebuilt by the estargz package of the pinned
// stargz-snapshotter module (seekable gzip with a table of contents, so that a snapshotter can
// fetch one file's chunks by HTTP range requests), the files named by -prioritize first in
// each layer (what the stargz snapshotter prefetches before the container starts), the TOC's
// digest and the uncompressed size in each layer's annotations, and a config with the new
// diff IDs. The image's other settings are kept.
//
//	gpucaas-estargz -layout DIR -from REPO:TAG -to REPO:TAG [-prioritize a/b,c/d]
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/stargz-snapshotter/estargz"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

const refName = "org.opencontainers.image.ref.name"

func main() {
	layout := flag.String("layout", "", "the OCI image layout")
	from := flag.String("from", "", "the image's tag in the layout (repository:tag)")
	to := flag.String("to", "", "the eStargz copy's tag")
	prioritize := flag.String("prioritize", "", "comma-separated paths read first at start, prefetched")
	flag.Parse()
	if err := run(*layout, *from, *to, *prioritize); err != nil {
		fmt.Fprintf(os.Stderr, "gpucaas-estargz: %v\n", err)
		os.Exit(1)
	}
}

func blobPath(layout string, d digest.Digest) string {
	return filepath.Join(layout, "blobs", d.Algorithm().String(), d.Encoded())
}

func readJSON(path string, into any) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, into)
}

// writeBlob stores data in the layout and returns its descriptor.
func writeBlob(layout, mediaType string, data []byte) (ocispec.Descriptor, error) {
	d := digest.FromBytes(data)
	if err := os.WriteFile(blobPath(layout, d), data, 0o644); err != nil {
		return ocispec.Descriptor{}, err
	}
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: int64(len(data))}, nil
}

type counter struct {
	hash.Hash
	n int64
}

func (c *counter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.Hash.Write(p)
}

// convertLayer rebuilds one layer as eStargz and returns its descriptor and diff ID.
func convertLayer(layout string, layer ocispec.Descriptor, prioritized []string) (ocispec.Descriptor, digest.Digest, error) {
	f, err := os.Open(blobPath(layout, layer.Digest))
	if err != nil {
		return ocispec.Descriptor{}, "", err
	}
	defer f.Close()
	var missed []string
	blob, err := estargz.Build(io.NewSectionReader(f, 0, layer.Size),
		estargz.WithPrioritizedFiles(prioritized),
		estargz.WithAllowPrioritizeNotFound(&missed),
		estargz.WithCompressionLevel(1),
		// a fixed count of workers fixes the chunks' boundaries: the same blob on every machine
		estargz.WithParallelism(2),
	)
	if err != nil {
		return ocispec.Descriptor{}, "", err
	}
	tmp, err := os.CreateTemp(filepath.Join(layout, "blobs", "sha256"), ".estargz-")
	if err != nil {
		blob.Close()
		return ocispec.Descriptor{}, "", err
	}
	defer os.Remove(tmp.Name())
	sum := &counter{Hash: sha256.New()}
	_, err = io.Copy(io.MultiWriter(tmp, sum), blob)
	if cerr := blob.Close(); err == nil {
		err = cerr
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return ocispec.Descriptor{}, "", err
	}
	size, err := blob.UncompressedSize()
	if err != nil {
		return ocispec.Descriptor{}, "", err
	}
	d := digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(sum.Sum(nil)))
	if err := os.Rename(tmp.Name(), blobPath(layout, d)); err != nil {
		return ocispec.Descriptor{}, "", err
	}
	return ocispec.Descriptor{
		MediaType: ocispec.MediaTypeImageLayerGzip,
		Digest:    d,
		Size:      sum.n,
		Annotations: map[string]string{
			estargz.TOCJSONDigestAnnotation:         blob.TOCDigest().String(),
			estargz.StoreUncompressedSizeAnnotation: strconv.FormatInt(size, 10),
		},
	}, blob.DiffID(), nil
}

func run(layout, from, to, prioritize string) error {
	if layout == "" || from == "" || to == "" {
		return errors.New("-layout, -from and -to are all needed")
	}
	var prioritized []string
	if prioritize != "" {
		prioritized = strings.Split(prioritize, ",")
	}
	var index ocispec.Index
	indexPath := filepath.Join(layout, "index.json")
	if err := readJSON(indexPath, &index); err != nil {
		return err
	}
	var src ocispec.Descriptor
	found := false
	kept := []ocispec.Descriptor{}
	for _, m := range index.Manifests {
		switch m.Annotations[refName] {
		case from:
			src, found = m, true
			kept = append(kept, m)
		case to: // an earlier copy is replaced
		default:
			kept = append(kept, m)
		}
	}
	if !found {
		return fmt.Errorf("no image tagged %q in %s", from, layout)
	}
	var manifest ocispec.Manifest
	if err := readJSON(blobPath(layout, src.Digest), &manifest); err != nil {
		return err
	}
	var config ocispec.Image
	if err := readJSON(blobPath(layout, manifest.Config.Digest), &config); err != nil {
		return err
	}
	config.RootFS.DiffIDs = nil
	layers := make([]ocispec.Descriptor, 0, len(manifest.Layers))
	for _, layer := range manifest.Layers {
		desc, diffID, err := convertLayer(layout, layer, prioritized)
		if err != nil {
			return fmt.Errorf("layer %s: %w", layer.Digest, err)
		}
		layers = append(layers, desc)
		config.RootFS.DiffIDs = append(config.RootFS.DiffIDs, diffID)
	}
	rawConfig, err := json.Marshal(config)
	if err != nil {
		return err
	}
	configDesc, err := writeBlob(layout, ocispec.MediaTypeImageConfig, rawConfig)
	if err != nil {
		return err
	}
	manifest.Config = configDesc
	manifest.Layers = layers
	rawManifest, err := json.Marshal(manifest)
	if err != nil {
		return err
	}
	manifestDesc, err := writeBlob(layout, ocispec.MediaTypeImageManifest, rawManifest)
	if err != nil {
		return err
	}
	manifestDesc.Annotations = map[string]string{refName: to}
	index.Manifests = append(kept, manifestDesc)
	rawIndex, err := json.Marshal(index)
	if err != nil {
		return err
	}
	return os.WriteFile(indexPath, rawIndex, 0o644)
}
