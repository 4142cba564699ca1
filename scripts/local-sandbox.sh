#!/usr/bin/env bash
# Install what the local providers' tests need, on Debian as root: bubblewrap (the default
# provider where it works) and e2fsprogs (mkfs.ext4, for the scratch quota's filesystem).
# Idempotent: what is already installed is left as it is.
#
#   sudo bash scripts/local-sandbox.sh
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "local-sandbox.sh: run as root (it installs packages)" >&2
    exit 1
fi
missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v mkfs.ext4 >/dev/null || [ -x /sbin/mkfs.ext4 ] || missing+=(e2fsprogs)
if [ ${#missing[@]} -gt 0 ]; then
    echo "+ apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# It must start a sandbox here, with every namespace (user namespaces on).
bwrap --unshare-all --ro-bind /usr /usr --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
    --symlink usr/bin /bin --proc /proc --dev /dev /usr/bin/true
echo "local sandbox tools ready: $(bwrap --version), $(mkfs.ext4 -V 2>&1 | head -1)"
