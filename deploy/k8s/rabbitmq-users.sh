#!/usr/bin/env bash
# deploy/k8s/rabbitmq-users.sh: creates or updates the broker users of the services in the
# RabbitmqCluster seckill-rabbitmq, with the passwords of the services' Secrets, and sets what
# each may do. Run it once RabbitMQ is ready, after the first install and after changing a
# password in a Secret; it is idempotent, and it leaves other users (the operator's default
# user, the administrator) alone.
#
#   bash deploy/k8s/rabbitmq-users.sh [NAMESPACE]        (default: seckill)
#
# The users: seckill, order and stock, from the amqp-url of seckill-service-urls,
# order-service-urls and stock-service-urls; keda, from keda-rabbitmq (host), if it exists.
# They go to the broker as a definitions document on rabbitmqctl's standard input (so no
# password appears in a command line), through `kubectl exec` into the first broker pod
# (SECKILL_RABBITMQ_POD to use another). Needs kubectl and base64.
set -euo pipefail

NS=${1:-seckill}
POD=${SECKILL_RABBITMQ_POD:-seckill-rabbitmq-server-0}

say() { printf 'rabbitmq-users: %s\n' "$*" >&2; }

# The user and password of an amqp:// URL in a Secret, one a line, percent-escapes decoded.
credentials() { # secret key
    local url userinfo
    url=$(kubectl -n "$NS" get secret "$1" -o "go-template={{index .data \"$2\"}}" | base64 -d)
    [[ $url =~ ^amqps?://([^@/]+)@ ]] || { say "Secret $1 key $2 is not an amqp://user:password@host URL"; exit 1; }
    userinfo=${BASH_REMATCH[1]}
    printf '%s\n' "$(decode "${userinfo%%:*}")" "$(decode "${userinfo#*:}")"
}
decode() { local s=${1//\\/\\\\}; printf '%b' "${s//%/\\x}"; }

json_string() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; printf '"%s"' "$s"; }

# What each user may do: regular expressions over queue and exchange names, the same as
# deploy/compose.yaml's (scripts/check-deploy.sh checks that they agree). See docs/DEPLOY.md,
# "Secrets and credentials", for why each one is needed.
PERMISSIONS=$(
    cat <<'JSON'
          {"user": "seckill", "vhost": "/",
           "configure": "^seckill\\.(orders|restock)(\\.dead|\\.retry\\.\\d+ms)?$|^seckill\\.broadcast$|^amq\\.gen-.+$",
           "write": "^amq\\.default$|^seckill\\.broadcast$|^amq\\.gen-.+$",
           "read": "^seckill\\.(orders|restock)(\\.retry\\.\\d+ms)?$|^seckill\\.broadcast$|^amq\\.gen-.+$"},
          {"user": "order", "vhost": "/",
           "configure": "^seckill\\.(orders|stock\\.release|order\\.expire)(\\.dead|\\.retry\\.\\d+ms)?$|^seckill\\.order\\.delay\\.\\d+s$",
           "write": "^amq\\.default$",
           "read": "^seckill\\.(orders|stock\\.release|order\\.expire)(\\.retry\\.\\d+ms)?$|^seckill\\.order\\.delay\\.\\d+s$"},
          {"user": "stock", "vhost": "/",
           "configure": "^seckill\\.(restock|stock\\.release)(\\.dead|\\.retry\\.\\d+ms)?$",
           "write": "^amq\\.default$",
           "read": "^seckill\\.(restock|stock\\.release)(\\.retry\\.\\d+ms)?$"}
JSON
)
# KEDA only counts a queue (a passive declare, which needs no permission): nothing at all.
KEDA_PERMISSIONS='{"user": "keda", "vhost": "/", "configure": "^$", "write": "^$", "read": "^$"}'

users=()
expected=(seckill order stock)
for pair in seckill:seckill-service-urls order:order-service-urls stock:stock-service-urls; do
    creds=$(credentials "${pair#*:}" amqp-url)
    mapfile -t c <<<"$creds"
    if [[ ${c[0]} != "${pair%%:*}" ]]; then
        say "Secret ${pair#*:}: the broker user must be ${pair%%:*}, not ${c[0]}"
        exit 1
    fi
    users+=("{\"name\": $(json_string "${c[0]}"), \"password\": $(json_string "${c[1]}"), \"tags\": []}")
done
if kubectl -n "$NS" get secret keda-rabbitmq >/dev/null 2>&1; then
    creds=$(credentials keda-rabbitmq host)
    mapfile -t c <<<"$creds"
    [[ ${c[0]} == keda ]] || { say "Secret keda-rabbitmq: the broker user must be keda"; exit 1; }
    users+=("{\"name\": \"keda\", \"password\": $(json_string "${c[1]}"), \"tags\": []}")
    expected+=(keda)
    PERMISSIONS+=",
          $KEDA_PERMISSIONS"
fi

definitions=$(
    printf '{\n  "users": [\n    %s' "${users[0]}"
    printf ',\n    %s' "${users[@]:1}"
    printf '\n  ],\n  "permissions": [\n%s\n  ]\n}\n' "$PERMISSIONS"
)
say "importing users ${expected[*]} into $NS/$POD"
printf '%s\n' "$definitions" | kubectl -n "$NS" exec -i "$POD" -c rabbitmq -- rabbitmqctl import_definitions
kubectl -n "$NS" exec "$POD" -c rabbitmq -- rabbitmqctl list_permissions -p /
