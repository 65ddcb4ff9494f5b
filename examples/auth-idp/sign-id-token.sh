#!/usr/bin/env bash
# Signs an RS256 token as a stand-in identity provider would: sign-id-token.sh SUB TENANT
# (its key is the throwaway test key in tests/fixtures/auth; jwks.json here publishes it).
set -euo pipefail
b64() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }
now=$(date +%s)
header=$(printf '{"alg":"RS256","typ":"JWT","kid":"corp-1"}' | b64)
payload=$(printf '{"iss":"https://login.example.com/","aud":"agui-gateway","sub":"%s","tenant":"%s","iat":%d,"exp":%d,"scope":"openid profile"}' "$1" "$2" "$now" "$((now + 600))" | b64)
signature=$(printf '%s.%s' "$header" "$payload" | openssl dgst -sha256 -sign "$(dirname "$0")/../../tests/fixtures/auth/idp-rsa.pem" -binary | b64)
printf '%s.%s.%s\n' "$header" "$payload" "$signature"
