# store_servers.sh - sourced by tests/e2e_store.sh and bench/run_store.sh: start the
# stores they read from, on 127.0.0.1, as children of the calling shell (their pids in
# STORE_PIDS; store_stop kills them). Needs WORK (a scratch directory) and PY (python3).
STORE_PIDS=()
STORE_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

store_free_port() {
    $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

store_wait_file() { for _ in $(seq 300); do [[ -s $1 ]] && return 0; sleep 0.1; done; return 1; }
store_wait_http() { for _ in $(seq 300); do curl -s -o /dev/null "$@" && return 0; sleep 0.1; done; return 1; }

# nginx_start DIR PORT ROOT [TLS]: nginx (one process, logs in DIR) serving ROOT on
# 127.0.0.1:PORT, over https with DIR/ca.pem and DIR/key.pem when TLS is given.
nginx_start() {
    local d=$1 port=$2 root=$3 tls=""
    [[ -n ${4:-} ]] && tls="ssl_certificate $d/ca.pem; ssl_certificate_key $d/key.pem;"
    mkdir -p "$d"
    cat > "$d/nginx.conf" << CONF
daemon off;
master_process off;
error_log $d/error.log;
pid $d/nginx.pid;
events {}
http {
  access_log off;
  client_body_temp_path $d/b; proxy_temp_path $d/p;
  fastcgi_temp_path $d/f; uwsgi_temp_path $d/u; scgi_temp_path $d/s;
  server { listen 127.0.0.1:$port${4:+ ssl}; root $root; $tls }
}
CONF
    nginx -c "$d/nginx.conf" -p "$d" > "$d/out" 2>&1 &
    STORE_PIDS+=($!)
}

# store_nginx ROOT: nginx serving ROOT (Range, ETag from mtime and size); sets NGINX_PORT.
store_nginx() {
    NGINX_PORT=$(store_free_port)
    nginx_start "$WORK/nginx.$NGINX_PORT" "$NGINX_PORT" "$1"
    store_wait_http "http://127.0.0.1:$NGINX_PORT/"
}

# store_nginx_tls ROOT: nginx serving ROOT over https with a certificate for 127.0.0.1 made
# here (its CA: $WORK/tls/ca.pem); sets NGINX_TLS_PORT.
store_nginx_tls() {
    NGINX_TLS_PORT=$(store_free_port)
    mkdir -p "$WORK/tls"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 \
        -addext subjectAltName=IP:127.0.0.1 -keyout "$WORK/tls/key.pem" \
        -out "$WORK/tls/ca.pem" 2> /dev/null
    nginx_start "$WORK/tls" "$NGINX_TLS_PORT" "$1" tls
    store_wait_http "https://127.0.0.1:$NGINX_TLS_PORT/" --cacert "$WORK/tls/ca.pem"
}

# store_proxy UPSTREAM-URL [--sigv4 KEY:SECRET]: tests/store_proxy.py in front of it; sets
# PROXY_PORT. store_ctl PORT JSON sets its faults.
store_proxy() {
    local pf=$WORK/proxy.$RANDOM.port
    $PY "$STORE_HERE/store_proxy.py" --upstream "$1" --port-file "$pf" "${@:2}" &
    STORE_PIDS+=($!)
    store_wait_file "$pf" || return 1
    PROXY_PORT=$(cat "$pf")
}
store_ctl() { curl -s -X POST -d "$2" "http://127.0.0.1:$1/__control" > /dev/null; }

# store_s3rver DIR BUCKET: s3rver holding DIR, with BUCKET; sets S3RVER_PORT.
store_s3rver() {
    S3RVER_PORT=$(store_free_port)
    "$S3RVER" -d "$1" -a 127.0.0.1 -p "$S3RVER_PORT" --configure-bucket "$2" --silent \
        > "$WORK/s3rver.$S3RVER_PORT.out" 2>&1 &
    STORE_PIDS+=($!)
    store_wait_http "http://127.0.0.1:$S3RVER_PORT/"
}

store_stop() { for p in "${STORE_PIDS[@]}"; do kill "$p" 2> /dev/null; done; wait 2> /dev/null; }
