#!/usr/bin/env bash
# A private CA and certificates signed by it: one for glm-coordinator's TLS
# (--tls-cert/--tls-key; its clients pass --tls-ca), and a client certificate
# for the workers (mTLS: their --tls-cert/--tls-key, the coordinator's
# --tls-client-ca=ca.crt):
#   deploy/tls/make_certs.sh DIR [NAME...]
# writes DIR/ca.crt, DIR/ca.key, DIR/tls.crt, DIR/tls.key, DIR/worker.crt and
# DIR/worker.key. The coordinator's certificate is valid for every NAME
# clients dial it by (default: the Kubernetes Service's names glm-coordinator
# and glm-coordinator.default.svc); an IP address is given as IP:198.18.0.1.
set -euo pipefail
dir=${1:?usage: make_certs.sh DIR [NAME...]}
shift
(($# > 0)) || set -- glm-coordinator glm-coordinator.default.svc
names=("$@")
san=""
for name in "${names[@]}"; do
  [[ $name == IP:* ]] && san+=",$name" || san+=",DNS:$name"
done
mkdir -p "$dir"
cd "$dir"
umask 077
openssl req -x509 -newkey rsa:3072 -nodes -days 365 -subj /CN=glm-ca \
  -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey rsa:3072 -nodes -subj "/CN=${names[0]#IP:}" \
  -keyout tls.key -out tls.csr 2>/dev/null
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
  -extfile <(printf 'subjectAltName=%s\n' "${san#,}") -out tls.crt 2>/dev/null
openssl req -newkey rsa:3072 -nodes -subj /CN=glm-worker \
  -keyout worker.key -out worker.csr 2>/dev/null
openssl x509 -req -in worker.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
  -extfile <(printf 'extendedKeyUsage=clientAuth\n') -out worker.crt 2>/dev/null
rm -f tls.csr worker.csr ca.srl
chmod 644 ca.crt tls.crt worker.crt
echo "wrote $dir/ca.crt, $dir/tls.crt, $dir/worker.crt and their keys (names: ${names[*]})"
