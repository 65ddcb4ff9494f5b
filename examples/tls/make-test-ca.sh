#!/usr/bin/env bash
# make-test-ca.sh DIR [NAME...]: a private CA and a server certificate it signed, for trying the
# gateway's HTTPS (docs/deploy.md, "Serving HTTPS") and for the client tests. Writes
#   DIR/ca.crt       the CA certificate: what clients trust (curl --cacert, NODE_EXTRA_CA_CERTS)
#   DIR/server.crt   the server certificate then the CA: the full chain, for tls.cert_file
#   DIR/server.key   its private key (PKCS#8), for tls.key_file
# for the names given (default: localhost 127.0.0.1), valid for 30 days. Needs openssl.
# Not for production: use your organisation's CA or an ACME client there.
set -euo pipefail
dir="${1:?usage: make-test-ca.sh DIR [NAME...]}"
shift
if [ "$#" -gt 0 ]; then names=("$@"); else names=(localhost 127.0.0.1); fi
mkdir -p "$dir"
san=""
for name in "${names[@]}"; do
  if [[ "$name" =~ ^[0-9.]+$ || "$name" == *:* ]]; then san+="IP:$name,"; else san+="DNS:$name,"; fi
done
san="${san%,}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
  -subj "/CN=agui-gateway test CA" -keyout "$work/ca.key" -out "$dir/ca.crt" \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=${names[0]}" \
  -keyout "$dir/server.key" -out "$work/server.csr" 2>/dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n' "$san" >"$work/ext"
openssl x509 -req -in "$work/server.csr" -CA "$dir/ca.crt" -CAkey "$work/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
  -days 30 -extfile "$work/ext" -out "$work/server.crt" 2>/dev/null
cat "$work/server.crt" "$dir/ca.crt" >"$dir/server.crt"
echo "made $dir/ca.crt and $dir/server.crt, $dir/server.key for ${names[*]}"
