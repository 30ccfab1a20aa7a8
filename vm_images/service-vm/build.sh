#!/usr/bin/env bash
# Build the gpucaas Fabric Manager service VM image: a minimal Debian 12 with the
# NVIDIA driver and nvidia-fabricmanager configured for the shared NVSwitch model
# (FABRIC_MODE=1) with resiliency restart, its API bound to the VM's private
# interface only, and nothing else listening.
#
#   sudo vm_images/service-vm/build.sh [OUT.qcow2]
#
# Needs: mmdebstrap, qemu-utils (qemu-img), network access to deb.debian.org and
# developer.download.nvidia.com. Environment knobs:
#   NVIDIA_BRANCH   driver/FM branch, both must match exactly (default 550)
#   SUITE           Debian suite (default bookworm)
#   SIZE            disk size (default 4G)
#   VM_IP / HOST_IP the private /30 (default 10.254.254.2 / 10.254.254.1; must match
#                   GPUCAAS_FABRIC_FM_ADDRESS and the libvirt network the service defines)
set -euo pipefail

OUT=${1:-service-vm.qcow2}
NVIDIA_BRANCH=${NVIDIA_BRANCH:-550}
SUITE=${SUITE:-bookworm}
SIZE=${SIZE:-4G}
VM_IP=${VM_IP:-10.254.254.2}
HOST_IP=${HOST_IP:-10.254.254.1}
HERE=$(cd "$(dirname "$0")" && pwd)
CUDA_REPO=https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64

for tool in mmdebstrap qemu-img; do
  command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install mmdebstrap qemu-utils)" >&2; exit 1; }
done
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Render the config files that carry the addresses.
sed -e "s/@VM_IP@/${VM_IP}/g" "$HERE/files/fabricmanager.cfg.in" > "$WORK/fabricmanager.cfg"
sed -e "s/@VM_IP@/${VM_IP}/g" -e "s/@HOST_IP@/${HOST_IP}/g" "$HERE/files/10-fabric.network.in" > "$WORK/10-fabric.network"
sed -e "s/@VM_IP@/${VM_IP}/g" -e "s/@HOST_IP@/${HOST_IP}/g" "$HERE/files/nftables.conf.in" > "$WORK/nftables.conf"

# 1. Root file system: minimal Debian + kernel + systemd + networkd + nftables. No ssh,
#    no getty on anything but the serial console, no other daemon.
mmdebstrap --variant=minbase --components=main,contrib,non-free-firmware \
  --include=linux-image-cloud-amd64,systemd-sysv,udev,nftables,dmidecode,kmod,ca-certificates,curl,gnupg,pciutils \
  --customize-hook="curl -fsSL ${CUDA_REPO}/cuda-keyring_1.1-1_all.deb -o \$1/tmp/cuda-keyring.deb" \
  --customize-hook='chroot "$1" dpkg -i /tmp/cuda-keyring.deb && rm "$1/tmp/cuda-keyring.deb"' \
  --customize-hook='chroot "$1" apt-get update -q' \
  --customize-hook="chroot \"\$1\" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      nvidia-open-${NVIDIA_BRANCH} nvidia-fabricmanager-${NVIDIA_BRANCH}" \
  --customize-hook="install -D -m 0644 $WORK/fabricmanager.cfg \"\$1/usr/share/nvidia/nvswitch/fabricmanager.cfg\"" \
  --customize-hook="install -D -m 0755 $HERE/files/gpucaas-fm-start \"\$1/usr/local/sbin/gpucaas-fm-start\"" \
  --customize-hook="install -D -m 0644 $HERE/files/nvidia-fabricmanager.override.conf \"\$1/etc/systemd/system/nvidia-fabricmanager.service.d/gpucaas.conf\"" \
  --customize-hook="install -D -m 0644 $WORK/10-fabric.network \"\$1/etc/systemd/network/10-fabric.network\"" \
  --customize-hook="install -D -m 0644 $WORK/nftables.conf \"\$1/etc/nftables.conf\"" \
  --customize-hook='echo gpucaas-fabric-vm > "$1/etc/hostname"' \
  --customize-hook='chroot "$1" systemctl enable systemd-networkd nftables nvidia-fabricmanager serial-getty@ttyS0' \
  --customize-hook='chroot "$1" systemctl mask systemd-resolved.service getty@tty1.service \
      apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer' \
  --customize-hook='chroot "$1" apt-get purge -y -q curl gnupg && chroot "$1" apt-get autoremove -y -q' \
  --customize-hook='printf "LABEL=fabricvm / ext4 defaults 0 1\n" > "$1/etc/fstab"' \
  "$SUITE" "$WORK/rootfs.tar" http://deb.debian.org/debian

# 2. Disk image: one ext4 partition (label fabricvm). No boot loader: libvirt boots the
#    kernel + initrd copied out beside the image (GPUCAAS_FABRIC_KERNEL / _INITRD) with
#    root=LABEL=fabricvm, so a kernel update is a file swap on the host.
qemu-img create -f raw "$WORK/disk.raw" "$SIZE"
sfdisk "$WORK/disk.raw" <<<'type=83'
LOOP=$(losetup --show -fP "$WORK/disk.raw")
trap 'losetup -d "$LOOP" 2>/dev/null; rm -rf "$WORK"' EXIT
mkfs.ext4 -q -L fabricvm "${LOOP}p1"
mkdir "$WORK/mnt" && mount "${LOOP}p1" "$WORK/mnt"
tar -C "$WORK/mnt" -xf "$WORK/rootfs.tar"
cp "$WORK"/mnt/boot/vmlinuz-* "$(dirname "$OUT")/service-vm.vmlinuz"
cp "$WORK"/mnt/boot/initrd.img-* "$(dirname "$OUT")/service-vm.initrd"
umount "$WORK/mnt"
losetup -d "$LOOP"
qemu-img convert -O qcow2 "$WORK/disk.raw" "$OUT"
echo "built $OUT (+ service-vm.vmlinuz, service-vm.initrd beside it)"
