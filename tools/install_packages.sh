#!/usr/bin/env bash
# Installs the Debian packages named as arguments that are not installed yet: with apt-get as
# root, or through sudo. Where neither is at hand (a minimal image has no sudo), it names the
# packages and the command to run as root, and exits 2.
#
#   bash tools/install_packages.sh PACKAGE...
set -euo pipefail

missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]})) || exit 0

if [ "$(id -u)" = 0 ]; then
  as_root=()
elif command -v sudo >/dev/null; then
  as_root=(sudo)
else
  cat >&2 <<MSG
setup: these Debian packages are missing: ${missing[*]}
setup: installing them needs root, and this user is not root and has no sudo. As root, run
  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}
then run this command again.
MSG
  exit 2
fi
echo "setup: installing ${missing[*]}" >&2
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
