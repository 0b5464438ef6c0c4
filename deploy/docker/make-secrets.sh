#!/usr/bin/env bash
# Makes the secrets deploy/docker/compose.yaml needs, in deploy/docker/secrets/:
#   tokens             an admin token (`ops`) and the peer token, one per line, mode 0600
#   ca.pem, ca.key     the cluster CA (ca.key stays here: it signs the certificates of nodes
#                      added later; keep it off the nodes)
#   node-N.pem/.key    each node's certificate (tenure-N, localhost, 127.0.0.1) and key
# The container runs as uid/gid 7101, so the token file and the keys are given to 7101:
# run this as root, or with rootless podman as `podman unshare deploy/docker/make-secrets.sh`.
# It refuses to overwrite secrets it made before: remove the folder to make new ones.
set -euo pipefail
dir="$(cd "$(dirname "$0")" && pwd)/secrets"
nodes=${TENURE_NODES:-3}
uid=${TENURE_UID:-7101}
command -v openssl >/dev/null 2>&1 || { echo "needs openssl" >&2; exit 1; }
if [ -e "$dir/tokens" ]; then
  echo "$dir already holds secrets: remove it to make new ones" >&2
  exit 1
fi
umask 077
mkdir -p "$dir"
cd "$dir"
printf '%s ops admin\n%s nodes peer\n' "$(openssl rand -hex 32)" "$(openssl rand -hex 32)" >tokens
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
  -subj "/CN=tenure compose cluster CA" -keyout ca.key -out ca.pem 2>/dev/null
for n in $(seq 1 "$nodes"); do
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=tenure-$n" \
    -keyout "node-$n.key" -out "node-$n.csr" 2>/dev/null
  printf 'subjectAltName=DNS:tenure-%s,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' "$n" >"node-$n.ext"
  openssl x509 -req -in "node-$n.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 \
    -extfile "node-$n.ext" -out "node-$n.pem" 2>/dev/null
  rm "node-$n.csr" "node-$n.ext"
done
rm -f ca.srl
chmod 0644 ca.pem node-*.pem
chown "$uid:$uid" tokens node-*.key
echo "secrets for $nodes nodes in $dir"
echo "the admin token is the first field of its first line; from this host, once the cluster is up:"
echo "  TENURE_TOKEN=\$(awk 'NR==1{print \$1}' $dir/tokens) tenure --endpoints 127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103 --ca-cert $dir/ca.pem cluster status"
