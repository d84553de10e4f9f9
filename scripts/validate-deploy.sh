#!/usr/bin/env bash
# Offline validation of the Kubernetes manifests in deploy/k8s/ (no cluster needed):
# kubernetes-validate (PyPI, pinned below; it bundles the Kubernetes JSON schemas) checks
# every manifest strictly (unknown fields and wrong types rejected) against the oldest
# and the newest Kubernetes it knows here, then checks that it rejects two broken copies
# of the agents' Job (a misspelled field, a wrong type), so a validator that accepts
# anything fails this script. The schemas do not check values (an unknown
# completionMode passes them): tests/it/deploy.rs checks those against the CLI contract,
# and the compose file's structure. Neither runs kubectl nor docker compose.
# Installs the validator into a virtualenv (COUNTERLAB_VALIDATE_VENV, default
# target/validate-deploy-venv) when it is absent. Exit status: 0 when all checks hold.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=1.37.0
KUBE_VERSIONS=(1.25 1.37)
venv=${COUNTERLAB_VALIDATE_VENV:-target/validate-deploy-venv}
validator="$venv/bin/kubernetes-validate"

if ! [ -x "$validator" ] || [ "$("$validator" --version 2>/dev/null)" != "$VERSION" ]; then
  echo "validate-deploy: installing kubernetes-validate $VERSION into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$VERSION"
fi

manifests=(deploy/k8s/*.yaml)
for k in "${KUBE_VERSIONS[@]}"; do
  "$validator" --strict --quiet -k "$k" "${manifests[@]}"
  echo "validate-deploy: ${#manifests[@]} manifests valid against Kubernetes $k (strict)"
done

broken=$(mktemp -d)
trap 'rm -rf "$broken"' EXIT
# Each broken copy must be refused; sed must have changed the file, or the check is void.
expect_refused() {
  local name=$1 expr=$2 out="$broken/$1.yaml"
  sed "$expr" deploy/k8s/20-load.yaml > "$out"
  if cmp -s deploy/k8s/20-load.yaml "$out"; then
    echo "validate-deploy: the $name mutation changed nothing in 20-load.yaml" >&2
    exit 1
  fi
  if "$validator" --strict --quiet -k "${KUBE_VERSIONS[-1]}" "$out" >"$broken/$name.log" 2>&1; then
    echo "validate-deploy: the validator accepted a broken manifest ($name)" >&2
    exit 1
  fi
  echo "validate-deploy: broken copy refused ($name): $(grep -m1 ERROR "$broken/$name.log" | sed 's/.*version [0-9.]*: //')"
}
expect_refused misspelled-field 's/^  backoffLimit: 0/  backofLimit: 0/'
expect_refused wrong-type 's/^  parallelism: \([0-9]*\)/  parallelism: "all"/'
