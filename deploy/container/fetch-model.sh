#!/bin/sh
# fetch-model.sh URL DEST [SHA256]: downloads a model file once (an init container of the Helm
# chart's worker pods, model.source.url). Skips the download when DEST exists and matches SHA256;
# checks the file against SHA256 when given; writes DEST only when complete.
set -eu
if [ "$#" -lt 2 ] || [ "$#" -gt 3 ]; then
  echo "usage: fetch-model.sh URL DEST [SHA256]" >&2
  exit 2
fi
url=$1
dest=$2
want=${3:-}
check() {
  [ -z "$want" ] && return 0
  got=$(sha256sum "$1" | cut -d' ' -f1)
  [ "$got" = "$want" ]
}
if [ -f "$dest" ] && check "$dest"; then
  echo "fetch-model: $dest present"
  exit 0
fi
mkdir -p "$(dirname "$dest")"
tmp="$dest.part"
echo "fetch-model: $url -> $dest"
curl --fail --location --retry 5 --retry-delay 5 --continue-at - --output "$tmp" "$url"
if ! check "$tmp"; then
  echo "fetch-model: $url: SHA-256 is not $want" >&2
  rm -f "$tmp"
  exit 1
fi
mv "$tmp" "$dest"
echo "fetch-model: done"
