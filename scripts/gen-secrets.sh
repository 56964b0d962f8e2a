#!/usr/bin/env bash
# scripts/gen-secrets.sh: fresh random credentials for a new install, printed on stdout.
#
#   bash scripts/gen-secrets.sh --env > deploy/.env
#       the variables deploy/compose.yaml reads (compose loads deploy/.env by itself)
#   bash scripts/gen-secrets.sh --k8s [--namespace NS] [--redis-host HOST:PORT] | kubectl create -f -
#       the Kubernetes Secrets the manifests reference (deploy/k8s), as YAML
#   bash scripts/gen-secrets.sh --key
#       one new random key (replacing one link key or password; docs/DEPLOY.md)
#
# Every value is random: link keys and the JWT secret 48 bytes, passwords 32 bytes, from
# /dev/urandom, written in URL-safe base64 (no "+", "/", "=" or ","), so they go into URLs,
# env files, Redis ACLs and comma-separated key lists as they are. Nothing is written to disk
# and nothing is kept: the output is the only copy. Each run makes new values, so run it once
# per install (`kubectl create` refuses to overwrite an existing Secret; `apply` would replace
# every credential at once, and the PostgreSQL password is read only when the cluster is made).
#
# --k8s options (defaults: the in-cluster names of deploy/k8s):
#   --namespace NS          metadata.namespace of each Secret (default: none, kubectl's -n)
#   --redis-host HOST:PORT  the Redis of the services' URLs (default seckill-redis:6379, the dev
#                           StatefulSet; in prod your managed Redis, with the users of the
#                           seckill-redis-acl Secret created there)
#   --pg-host HOST:PORT     default seckill-pg-rw:5432 (the CloudNativePG read-write Service)
#   --amqp-host HOST:PORT   default seckill-rabbitmq:5672
set -euo pipefail

usage() { sed -n '2,26p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

MODE=
NAMESPACE=
REDIS_HOST=seckill-redis:6379
PG_HOST=seckill-pg-rw:5432
AMQP_HOST=seckill-rabbitmq:5672
while [[ $# -gt 0 ]]; do
    case $1 in
        --env | --k8s | --key) MODE=${1#--} ;;
        --namespace) NAMESPACE=${2:?--namespace needs a value}; shift ;;
        --redis-host) REDIS_HOST=${2:?--redis-host needs HOST:PORT}; shift ;;
        --pg-host) PG_HOST=${2:?--pg-host needs HOST:PORT}; shift ;;
        --amqp-host) AMQP_HOST=${2:?--amqp-host needs HOST:PORT}; shift ;;
        -h | --help) usage ;;
        *) echo "gen-secrets: unknown argument $1" >&2; usage ;;
    esac
    shift
done
[[ -n $MODE ]] || usage

# N random bytes as URL-safe base64 without padding (4/3 as many characters).
rand() { head -c "$1" /dev/urandom | base64 | tr -d '\n=' | tr '+/' '-_'; }
key() { rand 48; }
password() { rand 32; }
sha256() {
    if command -v sha256sum >/dev/null; then printf %s "$1" | sha256sum | cut -d' ' -f1
    elif command -v shasum >/dev/null; then printf %s "$1" | shasum -a 256 | cut -d' ' -f1
    else printf %s "$1" | openssl dgst -sha256 -r | cut -d' ' -f1
    fi
}

if [[ $MODE == key ]]; then
    key
    echo
    exit 0
fi

# The links (sender-receiver): every call or message between two services is signed with the
# key of its link, and each service holds the keys of its own links only.
LINKS=(gateway-seckill gateway-order gateway-stock seckill-stock seckill-order seckill-seckill
    order-stock order-order stock-seckill)
declare -A LINK
for l in "${LINKS[@]}"; do LINK[$l]=$(key); done
JWT=$(key)
ROOM=$(key)
PG_PASSWORD=$(password)
declare -A AMQP REDIS
for u in admin seckill order stock keda; do AMQP[$u]=$(password); done
for u in admin seckill order gateway; do REDIS[$u]=$(password); done

# The Redis users (the same as deploy/compose.yaml's configs.redis-acl): each service only
# the keys seckill:* and the commands it runs. Passwords as SHA-256 ("#..."), as Redis takes.
redis_acl() {
    cat <<EOF
user default on #$(sha256 "${REDIS[admin]}") ~* &* +@all
user seckill on #$(sha256 "${REDIS[seckill]}") resetchannels &seckill:* ~seckill:* -@all +ping +script|load +evalsha +cluster|slots +get +set +del +exists +decr +incr +incrby +hget +hset +hsetnx +hdel +hexists +hvals +hgetall +hmget +decrby +zadd +zrem +zcard +zrangebyscore +zscore +rpush +lrange +ltrim +publish
user order on #$(sha256 "${REDIS[order]}") resetchannels &seckill:* ~seckill:* -@all +ping +script|load +evalsha +cluster|slots +get +set +exists +decr +incr +hget +hset +hdel +zrem +publish
user gateway on #$(sha256 "${REDIS[gateway]}") resetchannels &seckill:* ~seckill:* -@all +ping +script|load +evalsha +cluster|slots +get +set +time +subscribe +unsubscribe
EOF
}

upper() { printf %s "$1" | tr '[:lower:]-' '[:upper:]_'; }

if [[ $MODE == env ]]; then
    cat <<EOF
# Credentials of deploy/compose.yaml, made by scripts/gen-secrets.sh --env on $(date -u +%Y-%m-%d).
# Never commit this file (deploy/.gitignore). Compose reads deploy/.env by itself; a shell can
# load it with: set -a; . deploy/.env; set +a
#
# The user JWTs' HS256 key (the gateway).
SECKILL_JWT_SECRET=$JWT
# One key per link SENDER_RECEIVER: the sender signs with it, the receiver checks with it.
EOF
    for l in "${LINKS[@]}"; do echo "SECKILL_LINK_$(upper "$l")=${LINK[$l]}"; done
    cat <<EOF
# The waiting rooms' key (the gateway and seckill-service): seals places and admissions.
SECKILL_ROOM_KEY=$ROOM
# PostgreSQL's postgres user (read when the data volume is first made).
SECKILL_POSTGRES_PASSWORD=$PG_PASSWORD
# RabbitMQ users: admin (management UI, tools) and one per service.
SECKILL_AMQP_PASSWORD_ADMIN=${AMQP[admin]}
SECKILL_AMQP_PASSWORD_SECKILL=${AMQP[seckill]}
SECKILL_AMQP_PASSWORD_ORDER=${AMQP[order]}
SECKILL_AMQP_PASSWORD_STOCK=${AMQP[stock]}
# Redis users: default (the administrator) and one per service that uses Redis.
SECKILL_REDIS_PASSWORD_ADMIN=${REDIS[admin]}
SECKILL_REDIS_PASSWORD_SECKILL=${REDIS[seckill]}
SECKILL_REDIS_PASSWORD_ORDER=${REDIS[order]}
SECKILL_REDIS_PASSWORD_GATEWAY=${REDIS[gateway]}
# The administrators' URLs on the published ports, for scripts/up.sh, scripts/test.sh and
# tools run on this machine against these servers (scripts/lib.sh reads these names).
SECKILL_PG_URL=postgres://postgres:$PG_PASSWORD@127.0.0.1:5432
SECKILL_REDIS_URL=redis://:${REDIS[admin]}@127.0.0.1:6379
SECKILL_AMQP_URL=amqp://admin:${AMQP[admin]}@127.0.0.1:5672/%2f
EOF
    exit 0
fi

# --k8s: one YAML document per Secret.
secret() { # name [type]
    printf -- '---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n' "$1"
    [[ -n $NAMESPACE ]] && printf '  namespace: %s\n' "$NAMESPACE"
    printf '  labels:\n    app.kubernetes.io/part-of: seckill\ntype: %s\nstringData:\n' "${2:-Opaque}"
}
amqp_url() { printf 'amqp://%s:%s@%s/%%2f' "$1" "${AMQP[$1]}" "$AMQP_HOST"; }
redis_url() { printf 'redis://%s:%s@%s' "$1" "${REDIS[$1]}" "$REDIS_HOST"; }
pg_url() { printf 'postgres://seckill:%s@%s/%s' "$PG_PASSWORD" "$PG_HOST" "$1"; }

cat <<EOF
# Secrets of deploy/k8s, made by scripts/gen-secrets.sh --k8s on $(date -u +%Y-%m-%d).
# Create them once, before the first apply: kubectl create -f - (never commit this output).
EOF
secret gateway-auth
printf '  # HS256 key of the users'"'"' JWTs (shared with whatever issues them in prod).\n'
printf '  jwt-secret: "%s"\n' "$JWT"
secret seckill-link-keys
printf '  # <sender>-<receiver>: the key the sender signs with. <sender>-<receiver>.accept: the keys\n'
printf '  # the receiver accepts, the same key, or "new,old" while it is replaced.\n'
for l in "${LINKS[@]}"; do
    printf '  %s: "%s"\n  %s.accept: "%s"\n' "$l" "${LINK[$l]}" "$l" "${LINK[$l]}"
done
secret seckill-room-key
printf '  # The waiting rooms'"'"' key, the gateway'"'"'s and seckill-service'"'"'s: seals places and admissions.\n'
printf '  room-key: "%s"\n' "$ROOM"
secret gateway-urls
printf '  # The Redis of the shared rate-limit buckets.\n'
printf '  redis-url: "%s"\n' "$(redis_url gateway)"
secret seckill-service-urls
printf '  redis-url: "%s"\n  amqp-url: "%s"\n' "$(redis_url seckill)" "$(amqp_url seckill)"
secret order-service-urls
printf '  database-url: "%s"\n  redis-url: "%s"\n  amqp-url: "%s"\n' \
    "$(pg_url seckill_order)" "$(redis_url order)" "$(amqp_url order)"
secret stock-service-urls
printf '  database-url: "%s"\n  amqp-url: "%s"\n' "$(pg_url seckill_stock)" "$(amqp_url stock)"
secret seckill-pg-credentials kubernetes.io/basic-auth
printf '  # The application role of the CloudNativePG cluster (bootstrap.initdb.secret).\n'
printf '  username: seckill\n  password: "%s"\n' "$PG_PASSWORD"
secret seckill-redis-acl
printf '  # The Redis users (dev StatefulSet: --aclfile; a managed Redis: create the same users).\n'
printf '  users.acl: |\n'
redis_acl | sed 's/^/    /'
printf '  # The default user'"'"'s password (redis-cli, the probe).\n'
printf '  admin-password: "%s"\n' "${REDIS[admin]}"
secret keda-rabbitmq
printf '  # KEDA (prod) counts seckill.orders as the broker user keda, which may read nothing.\n'
printf '  host: "%s"\n' "$(amqp_url keda)"
