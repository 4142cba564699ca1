#!/usr/bin/env bash
# Install and start what the container tests need, on Debian as root: the Docker engine with
# gVisor (runsc) registered, podman, and a Python test image built without any registry.
# Idempotent: whatever is already installed, running or built is left as it is.
#
#   sudo bash scripts/container-engines.sh
set -euo pipefail

IMAGE="${REWYN_TEST_IMAGE:-rewyn-test-python:3.11}"
DS_IMAGE="${REWYN_DS_IMAGE:-rewyn-datascience:bookworm-3}"
LOG_DIR="${REWYN_ENGINE_LOGS:-/var/log/rewyn-kernel}"

if [ "$(id -u)" != 0 ]; then
    echo "container-engines.sh: run as root (it installs packages and starts dockerd)" >&2
    exit 1
fi
mkdir -p "$LOG_DIR"

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v runsc >/dev/null || missing+=(runsc)
command -v podman >/dev/null || missing+=(podman)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
    echo "+ apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >"$LOG_DIR/apt.log"
fi

# gVisor refuses to start here without --network=none in its runtime arguments; --host-uds=open
# lets a sandbox connect to a Unix socket mounted into it (the network allow-list's proxy).
mkdir -p /etc/docker
if ! grep -q host-uds /etc/docker/daemon.json 2>/dev/null; then
    echo '{"runtimes": {"runsc": {"path": "/usr/bin/runsc",
      "runtimeArgs": ["--network=none", "--host-uds=open"]}}}' >/etc/docker/daemon.json
    pkill -HUP -x dockerd 2>/dev/null || true
fi

if ! docker info >/dev/null 2>&1; then
    # A daemon killed uncleanly leaves its pid files behind, and a new one refuses to start.
    for pidfile in /var/run/docker.pid /var/run/docker/containerd/containerd.pid; do
        if [ -f "$pidfile" ] && ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            rm -f "$pidfile"
        fi
    done
    echo "+ starting dockerd (log: $LOG_DIR/dockerd.log)"
    nohup dockerd --iptables=false --bridge=none >"$LOG_DIR/dockerd.log" 2>&1 &
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && break
        sleep 0.5
    done
    docker info >/dev/null 2>&1 || { tail -20 "$LOG_DIR/dockerd.log" >&2; exit 1; }
fi

have_docker_image=0; docker image inspect "$IMAGE" >/dev/null 2>&1 && have_docker_image=1
have_podman_image=0; podman image exists "$IMAGE" 2>/dev/null && have_podman_image=1
if [ $have_docker_image = 0 ] || [ $have_podman_image = 0 ]; then
    rootfs=$(mktemp -d /tmp/rewyn-rootfs.XXXXXX)
    trap 'rm -rf "$rootfs"' EXIT
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    echo "+ debootstrap a python3 image ($IMAGE) from ${mirror:-the default mirror}"
    debootstrap --variant=minbase --include=python3 bookworm "$rootfs" ${mirror:+"$mirror"} \
        >"$LOG_DIR/debootstrap.log" 2>&1 || { tail -20 "$LOG_DIR/debootstrap.log" >&2; exit 1; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/usr/share/doc "$rootfs"/usr/share/man
    change='ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
    [ $have_docker_image = 1 ] || tar -C "$rootfs" -c . | docker import --change "$change" - "$IMAGE" >/dev/null
    [ $have_podman_image = 1 ] || tar -C "$rootfs" -c . | podman import --change "$change" - "$IMAGE" >/dev/null
fi
# The data-science image the container kernels are tested on: IPython, NumPy, pandas and
# matplotlib (with its inline backend), SymPy, tqdm, Jinja2 (pandas' Styler), pip, git and file
# from Debian's packages, and from PyPI ipywidgets, ipympl and ipykernel (the benchmarks' plain
# kernel, with the same packages); no image registry. (Its tag changes with what it holds: a
# machine that built the last one builds this.)
if ! docker image inspect "$DS_IMAGE" >/dev/null 2>&1; then
    ds_rootfs=$(mktemp -d /tmp/rewyn-ds-rootfs.XXXXXX)
    trap 'rm -rf "$ds_rootfs" ${rootfs:+"$rootfs"}' EXIT
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    echo "+ debootstrap a data-science image ($DS_IMAGE)"
    debootstrap --variant=minbase \
        --include=python3,ipython3,python3-numpy,python3-pandas,python3-matplotlib,python3-matplotlib-inline,python3-sympy,python3-tqdm,python3-jinja2,python3-pip,git,file \
        bookworm "$ds_rootfs" ${mirror:+"$mirror"} >"$LOG_DIR/debootstrap-ds.log" 2>&1 \
        || { tail -20 "$LOG_DIR/debootstrap-ds.log" >&2; exit 1; }
    # ipywidgets 8 (Debian's is 6, which only ipykernel's own comms carry), ipympl (not in
    # Debian) and ipykernel 6 (Debian's fails to configure in a minbase chroot) from PyPI, by
    # the image's pip.
    # (The host's name servers and its certificate authorities, for the install only: a
    # registry reached through a TLS proxy is trusted by the host's bundle, not by Debian's,
    # and Debian's pip reads the system's bundle whatever --cert says.)
    bundle="$ds_rootfs/etc/ssl/certs/ca-certificates.crt"
    cp /etc/resolv.conf "$ds_rootfs/etc/resolv.conf"
    cp "$bundle" "$ds_rootfs/tmp/debian-ca.crt"
    cp "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$bundle"
    chroot "$ds_rootfs" python3 -m pip install -q --no-cache-dir --break-system-packages \
        --no-warn-script-location "ipywidgets>=8.1,<9" "ipykernel>=6.29,<7" "ipympl>=0.9,<0.10" \
        >"$LOG_DIR/pip-ds.log" 2>&1 \
        || { tail -20 "$LOG_DIR/pip-ds.log" >&2; exit 1; }
    mv "$ds_rootfs/tmp/debian-ca.crt" "$bundle"
    rm -f "$ds_rootfs/etc/resolv.conf"
    rm -rf "$ds_rootfs"/var/cache/apt/archives/*.deb "$ds_rootfs"/usr/share/doc "$ds_rootfs"/usr/share/man
    change='ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
    tar -C "$ds_rootfs" -c . | docker import --change "$change" - "$DS_IMAGE" >/dev/null
    rm -rf "$ds_rootfs"
fi
echo "container engines ready: docker $(docker version --format '{{.Server.Version}}'), runsc, podman; images $IMAGE, $DS_IMAGE"
