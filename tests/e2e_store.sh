#!/usr/bin/env bash
# e2e_store.sh - media on object storage, end to end against real servers that this
# test starts on 127.0.0.1: nginx (HTTP, Range, ETag) serving generated WebDataset shards
# and loose clips, s3rver (an S3 store from the npm registry, under nodejs) holding the
# same shards, and tests/store_proxy.py in front of both: it checks every S3 request's
# SigV4 signature and injects the faults (503 with Retry-After, connections cut
# mid-body, a store that ignores Range, a store that is down, latency). Each case is a
# command and what its output must show; the bytes delivered from a store are compared
# with the bytes delivered from the local copy.
#   usage: e2e_store.sh PATH/TO/datahelix PATH/TO/mpi_nodes
set -u
KEEP=${DH_KEEP_WORK:-}
DH=${1:?usage: e2e_store.sh PATH/TO/datahelix PATH/TO/mpi_nodes}
MN=${2:?usage: e2e_store.sh PATH/TO/datahelix PATH/TO/mpi_nodes}
HERE=$(cd "$(dirname "$0")" && pwd)
S3RVER=${DH_S3RVER:-${DH_S3RVER_DIR:-${HOME:-/root}/.cache/datahelix/s3rver}/node_modules/.bin/s3rver}
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3
for need in nginx node "$S3RVER" curl; do
    command -v "$need" > /dev/null 2>&1 || { echo "e2e_store: $need is missing (bash scripts/deps.sh installs it)"; exit 1; }
done
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dhstore.XXXXXX")
source "$HERE/store_servers.sh"
cleanup() { store_stop; [[ -n $KEEP ]] || rm -rf "$WORK"; }
trap cleanup EXIT
source "$(dirname "$0")/lib.sh"
ctl() { store_ctl "$@"; }
run() { # run MANIFEST OUT [more run options]: a real run of the clips workload, 2 ranks
    local m=$1 out=$2; shift 2
    timeout 300 "$DH" run --manifest "$m" --workload kinetics-clips --ranks 2 --workers 2 \
        --batch 4 "$@" > "$out" 2>&1
}
same_bytes() { # same_bytes MANIFEST-A MANIFEST-B: what each delivers, sample by sample
    timeout 300 "$MN" "$1" helix 2 2 4 3 "$WORK/a.log" > /dev/null 2>&1 &&
    timeout 300 "$MN" "$2" helix 2 2 4 3 "$WORK/b.log" > /dev/null 2>&1 &&
    cut -d' ' -f2- "$WORK/a.log" | sort > "$WORK/a.sorted" &&
    cut -d' ' -f2- "$WORK/b.log" | sort > "$WORK/b.sorted" &&
    test "$(wc -l < "$WORK/a.sorted")" -eq 12 && cmp -s "$WORK/a.sorted" "$WORK/b.sorted"
}

# ---- data: 12 clips in 3 shards, and 4 loose clips ----
"$DH" gen --workload kinetics-clips --out "$WORK/www/wds" --samples 12 --format wds \
    --per-shard 5 > /dev/null 2>&1
"$DH" gen --workload kinetics-clips --out "$WORK/www/loose" --samples 4 > /dev/null 2>&1
check "gen wrote the shards" test -f "$WORK/www/wds/shards/00002.tar"

# ---- nginx, and the proxy in front of it ----
store_nginx "$WORK/www"
check "nginx is up" curl -s -f -o /dev/null "http://127.0.0.1:$NGINX_PORT/wds/manifest.jsonl"
store_proxy "http://127.0.0.1:$NGINX_PORT"
HP=$PROXY_PORT
H=http://127.0.0.1:$HP

# ---- HTTP: index shards by range, run, the same bytes as the local copy ----
"$DH" index "$H/wds/shards/{00000..00002}.tar" -o "$WORK/http.jsonl" > "$WORK/hidx.out" 2>&1
check "http index: 3 shards, 12 samples" contains "$WORK/hidx.out" "3 tar shards: 12 samples + 0 skipped"
check "http index: paths are the URLs, objects pinned by ETag" contains "$WORK/http.jsonl" \
    "\"path\":\"$H/wds/shards/00000.tar\".*\"etag\":\"[^\"]*\".*\"offset\":512,\"member\":\"00000000.mp4\""
# the same lines as the local index, but for the URL and the ETag
sed -e "s#$H/wds/##g" -e 's/,"etag":"[^,]*"//' "$WORK/http.jsonl" > "$WORK/http.local.jsonl"
check "http index: every descriptor as the local index has it" \
    cmp -s "$WORK/http.local.jsonl" "$WORK/www/wds/manifest.jsonl"
run "$WORK/http.jsonl" "$WORK/hrun.out" --json "$WORK/hrun.json"
check "http run: the result file holds the fetch figures" contains "$WORK/hrun.json" \
    '"fetch_bytes":[1-9][0-9]*,"fetch_requests":[1-9][0-9]*,"fetch_retries":0,"fetch_failures":0,"fetch_wait_s":'
check "http run: the fetch model calibrated from its requests" contains "$WORK/hrun.out" \
    "fetch model (calibrated from the run's requests): [0-9.]* ms per request"
# the same reads, live: --metrics counts the workers' and the fetchers' requests as they go
timeout 120 "$DH" run --manifest "$WORK/http.jsonl" --workload kinetics-clips --ranks 2 \
    --workers 2 --batch 4 --steps 0 --metrics 0 --json "$WORK/hlive.json" \
    > "$WORK/hlive.out" 2> "$WORK/hlive.err" &
LIVE=$!
for _ in $(seq 300); do grep -q "metrics at" "$WORK/hlive.err" && break; sleep 0.1; done
MURL=$(grep -o 'http://127.0.0.1:[0-9]*/metrics' "$WORK/hlive.err")
read_live() { curl -sf "$MURL" > "$WORK/hlive.prom" &&
    grep -Eq '^datahelix_storage_read_bytes_total\{stream="train"\} [1-9]' "$WORK/hlive.prom" &&
    grep -Eq '^datahelix_storage_requests_total\{stream="train"\} [1-9]' "$WORK/hlive.prom"; }
for _ in $(seq 300); do read_live && break; sleep 0.1; done
check "http run, live: bytes and requests read from the store while it runs" read_live
kill -INT $LIVE; wait $LIVE
live_bytes=$(sed -n 's/^datahelix_storage_read_bytes_total{stream="train"} //p' "$WORK/hlive.prom")
final_bytes=$(sed -n 's/.*"fetch_bytes":\([0-9]*\).*/\1/p' "$WORK/hlive.json")
check "http run, live: no more than the run's own total ($live_bytes <= $final_bytes)" \
    test "${live_bytes:-1}" -le "${final_bytes:-0}"
"$DH" sim --workload kinetics-clips --ranks 2 --workers 2 --steps 20 --fetch-latency-ms 50 \
    --fetch-gbps 1 > "$WORK/simf.out" 2>&1
check "sim models a store (simulated figures, named so)" contains "$WORK/simf.out" \
    "storage (simulated): [0-9.]* MiB fetched in [0-9]* requests"
check "http run: every sample delivered" contains "$WORK/hrun.out" "delivered 12 + failed 0 = 12"
check "http run: what was fetched is reported" contains "$WORK/hrun.out" \
    "storage: [0-9.]* MiB fetched in [0-9]* requests, 0 retried, 0 reads failed"
check "http run: the same bytes as from the local shards" same_bytes "$WORK/www/wds/manifest.jsonl" "$WORK/http.jsonl"
# every policy, with ranks above and below workers (2 epochs: the same samples again within
# the fetchers' reach)
for pol in local pool helix helix-fifo; do
    for rw in "4 1" "1 3"; do
        set -- $rw
        timeout 300 "$DH" run --manifest "$WORK/http.jsonl" --workload kinetics-clips --ranks "$1" \
            --workers "$2" --batch 4 --epochs 2 --policy "$pol" > "$WORK/pol.$pol.$1.$2.out" 2>&1
        check "http run, $pol, $1 ranks x $2 workers: every sample delivered" contains \
            "$WORK/pol.$pol.$1.$2.out" "delivered 24 + failed 0 = 24"
    done
done
curl -s "$H/__stats" > "$WORK/hstats.json"
check "http: every GET asked a range and got 206" $PY -c "
import json,sys; s=json.load(open('$WORK/hstats.json'))
sys.exit(not (s['status'] == {'206': s['requests']} and all(r.startswith('bytes=') for r in s['ranges'])))"

# the local cache: a second run reads what the first fetched from it
DH_FETCH_CACHE=$WORK/cache run "$WORK/http.jsonl" "$WORK/c1.out"
DH_FETCH_CACHE=$WORK/cache run "$WORK/http.jsonl" "$WORK/c2.out" --json "$WORK/c2.json"
check "fetch cache: the second run delivers every sample" contains "$WORK/c2.out" "delivered 12 + failed 0 = 12"
check "fetch cache: the second run reads from it, asks the store nothing" contains "$WORK/c2.json" \
    '"fetch_bytes":0,"fetch_requests":0,.*"fetch_cache_hits":[1-9]'
DH_FETCH_CACHE=/proc/no/such/dir run "$WORK/http.jsonl" "$WORK/c3.out"
check "fetch cache that cannot be made: a warning, the run goes on" contains "$WORK/c3.out" \
    "datahelix: fetch cache /proc/no/such/dir: cannot be made: No such file or directory: going on without it"
check "fetch cache that cannot be made: every sample delivered" contains "$WORK/c3.out" "delivered 12 + failed 0 = 12"

# https with a private CA: refused until AWS_CA_BUNDLE names it
store_nginx_tls "$WORK/www"
HS=https://127.0.0.1:$NGINX_TLS_PORT
env -u AWS_CA_BUNDLE "$DH" index "$HS/wds/shards/00000.tar" -o "$WORK/tls0.jsonl" > "$WORK/tls0.out" 2>&1
check "https with an unknown CA: refused, named, the fix said" contains "$WORK/tls0.out" \
    "GET $HS/wds/shards/00000.tar bytes 0-0: SSL peer certificate or SSH remote key was not OK: SSL certificate problem: self-signed certificate (a store with a private CA: set AWS_CA_BUNDLE to its PEM file)"
AWS_CA_BUNDLE=$WORK/tls/ca.pem "$DH" index "$HS/wds/shards/{00000..00002}.tar" -o "$WORK/tls.jsonl" > "$WORK/tls.out" 2>&1
check "https with AWS_CA_BUNDLE: indexed" contains "$WORK/tls.out" "3 tar shards: 12 samples + 0 skipped"
AWS_CA_BUNDLE=$WORK/tls/ca.pem run "$WORK/tls.jsonl" "$WORK/tlsrun.out"
check "https with AWS_CA_BUNDLE: every sample delivered" contains "$WORK/tlsrun.out" "delivered 12 + failed 0 = 12"
AWS_CA_BUNDLE=$WORK/nothere.pem "$DH" index "$HS/wds/shards/00000.tar" -o "$WORK/tls2.jsonl" > "$WORK/tls2.out" 2>&1
check "AWS_CA_BUNDLE naming no file: named" contains "$WORK/tls2.out" "AWS_CA_BUNDLE=\"$WORK/nothere.pem\": No such file or directory"

# loose files, listed in a file of URLs
for f in "$WORK"/www/loose/video/*.mp4; do echo "$H/loose/video/$(basename "$f")"; done > "$WORK/urls.txt"
"$DH" index "$WORK/urls.txt" -o "$WORK/loose.jsonl" > "$WORK/lidx.out" 2>&1
check "http index of loose files from a list" contains "$WORK/lidx.out" "4 files: 4 probed + 0 skipped"
run "$WORK/loose.jsonl" "$WORK/lrun.out" --batch 2
check "http run of loose files" contains "$WORK/lrun.out" "delivered 4 + failed 0 = 4"

# ---- faults through the proxy ----
# (5 failures: the run's check that the store answers, before it starts, takes the first)
ctl "$HP" '{"fail": {"status": 503, "count": 5, "retry_after": 0.3}}'
run "$WORK/http.jsonl" "$WORK/f503.out"
check "503 with Retry-After: retried, every sample delivered" contains "$WORK/f503.out" "delivered 12 + failed 0 = 12"
check "503 with Retry-After: the retries are reported" contains "$WORK/f503.out" \
    "storage: [0-9.]* MiB fetched in [0-9]* requests, 4 retried, 0 reads failed; workers waited [0-9.]* s on the network"
ctl "$HP" '{"drop": 3}'
run "$WORK/http.jsonl" "$WORK/fdrop.out"
check "connections cut mid-body: retried, every sample delivered" contains "$WORK/fdrop.out" "delivered 12 + failed 0 = 12"
ctl "$HP" '{"delay_ms": 50, "throttle_bps": 4000000}'
run "$WORK/http.jsonl" "$WORK/fslow.out"
check "50 ms per request, 4 MB/s: every sample delivered" contains "$WORK/fslow.out" "delivered 12 + failed 0 = 12"
ctl "$HP" '{"delay_ms": 0, "throttle_bps": 0, "ignore_range": true}'
run "$WORK/http.jsonl" "$WORK/frange.out" --max-failed 1
check "a store ignoring Range: every sample failed, accounted" contains "$WORK/frange.out" "delivered 0 + failed 12 = 12"
check "a store ignoring Range: named" contains "$WORK/frange.out" \
    "shards/0000[0-2].tar:0000000[0-9].mp4: GET $H/wds/shards/0000[0-2].tar: the store ignored the Range header"
ctl "$HP" '{"ignore_range": false, "down": true}'
run "$WORK/http.jsonl" "$WORK/fdown0.out"
check "a store that is down when the run starts: refused (within 10 s), named" contains \
    "$WORK/fdown0.out" "cannot start the engine: the object store does not answer as it should: GET $H/wds/shards/00000.tar bytes 0-0: .*gave up after [0-9]* attempts: the next would pass the time allowed"
ctl "$HP" '{"down": false, "down_after": 1}' # down after the run's first answer
run "$WORK/http.jsonl" "$WORK/fdown.out" --max-failed 1 --sample-timeout 2
check "a store that is down: the run ends, every sample failed, accounted" contains "$WORK/fdown.out" "delivered 0 + failed 12 = 12"
check "a store that is down: named, with the attempts" contains "$WORK/fdown.out" \
    "GET $H/wds/shards/0000[0-2].tar bytes [0-9]*-[0-9]*: .*gave up after [0-9]* attempts"
# Ctrl-C while the workers retry a store that is down (each sample may take 120 s): the run
# ends at once, its requests and retries stopped, with the accounting of what was complete
ctl "$HP" '{"down": false, "down_after": 1}'
timeout 60 "$DH" run --manifest "$WORK/http.jsonl" --workload kinetics-clips --ranks 2 \
    --workers 2 --batch 4 --max-failed 1 --sample-timeout 120 > "$WORK/fint.out" 2>&1 &
pid=$!
sleep 2
kill -INT "$pid"
wait "$pid"
check "Ctrl-C while retrying a store that is down: the run ends at once (130, not 124)" \
    test $? -eq 130
check "Ctrl-C while retrying a store that is down: no sample failed for it" \
    contains "$WORK/fint.out" "delivered 0 + failed 0 = 0"
# a long run whose store goes down stops once the store failed 32 samples in a row, naming
# it (the share of failures over the whole run would take as many failures as deliveries)
# (12 samples delivered from the store, then 48 whose objects it no longer has, in order:
# each fails at once with a 404, however slow decoding is under a sanitizer; the first
# objects are there, so the run starts)
$PY - "$WORK/www/wds/manifest.jsonl" "$WORK/http.jsonl" "$WORK/mixed/m.jsonl" << 'EOF'
import json, os, sys, shutil
local, remote, out = sys.argv[1:4]
os.makedirs(os.path.dirname(out))
shutil.copytree(os.path.join(os.path.dirname(local), "shards"), os.path.join(os.path.dirname(out), "shards"))
lines = open(remote).read().splitlines()
for k in range(4):
    for l in open(remote).read().splitlines():
        d = json.loads(l)
        d["id"] = "gone%d:%s" % (k, d["id"])
        for m in d["media"]:
            m["path"] = m["path"].replace("/wds/shards/", "/gone/shards/")
        lines.append(json.dumps(d))
open(out, "w").write("\n".join(lines) + "\n")
EOF
ctl "$HP" '{"down": false}'
run "$WORK/mixed/m.jsonl" "$WORK/fdown2.out" --no-shuffle --max-failed 0.9
check "a store gone after deliveries: the run stops after 32 in a row, named" contains \
    "$WORK/fdown2.out" "the object store failed the last 3[2-9] samples in a row: it looks unreachable or refuses us"
"$DH" index "http://127.0.0.1:1/x.tar" -o "$WORK/port.jsonl" > "$WORK/port.out" 2>&1
check "index of a store at a wrong address gives up after a few attempts" contains "$WORK/port.out" \
    "gave up after 3 attempts (is the address right?)"
# an object gone, and an object changed since it was indexed
"$DH" inspect "$WORK/http.jsonl" --check-files > "$WORK/ichk.out" 2>&1
check "inspect --check-files: every object asked once, all there" test $? -eq 0
check "inspect --check-files: the count said" contains "$WORK/ichk.out" \
    "objects: 3 asked of their stores: 3 there and as indexed, 0 missing, unreadable or changed"
mv "$WORK/www/wds/shards/00001.tar" "$WORK/gone.tar"
"$DH" inspect "$WORK/http.jsonl" --check-files > "$WORK/igone.out" 2>&1
check "inspect --check-files: an object gone fails the check" test $? -eq 1
check "inspect --check-files: the object gone named with its first sample" contains \
    "$WORK/igone.out" "inspect: $WORK/http.jsonl:[0-9]*: sample \"$H/wds/shards/00001.tar:[0-9]*\": GET $H/wds/shards/00001.tar bytes 0-0: HTTP 404 (no such object) \[DH_ENOENT\]"
run "$WORK/http.jsonl" "$WORK/f404.out" --max-failed 1
check "a shard gone: its samples failed, the rest delivered" contains "$WORK/f404.out" "delivered 7 + failed 5 = 12"
check "a shard gone: named with the status" contains "$WORK/f404.out" \
    "GET $H/wds/shards/00001.tar bytes [0-9]*-[0-9]*: HTTP 404 (no such object)"
mv "$WORK/gone.tar" "$WORK/www/wds/shards/00001.tar"
touch -d '2001-01-01' "$WORK/www/wds/shards/00002.tar" # nginx's ETag is mtime and size
"$DH" inspect "$WORK/http.jsonl" --check-files > "$WORK/ichg.out" 2>&1
check "inspect --check-files: an object changed is named" contains "$WORK/ichg.out" \
    "shards/00002.tar:[0-9]*\": changed since it was indexed: ETag .* now, .* indexed (index it again) \[DH_ECORRUPT\]"
run "$WORK/http.jsonl" "$WORK/fchg.out" --max-failed 1
check "a shard changed: its samples failed, the rest delivered" contains "$WORK/fchg.out" "delivered 10 + failed 2 = 12"
check "a shard changed: named" contains "$WORK/fchg.out" "HTTP 412: the object changed since it was indexed"
"$DH" index "$H/wds/nothere.tar" "$H/wds/shards/00000.tar" -o "$WORK/miss.jsonl" > "$WORK/miss.out" 2>&1
check "index: a missing object is named, the rest indexed" contains "$WORK/miss.out" \
    "$H/wds/nothere.tar: shard skipped: GET $H/wds/nothere.tar bytes 0-0: HTTP 404"
"$DH" index "$H/wds/shards/00000.tar?X-Amz-Signature=SECRETSIG" "$H/x?sig=SECRETSIG" \
    -o "$WORK/q.jsonl" > "$WORK/q.out" 2>&1
check "a query string (a presigned URL's signature) never reaches a message" \
    bash -c "! grep -q SECRETSIG '$WORK/q.out'"
check "a presigned shard URL is a shard, its query string not in the sample ids" $PY -c "
import json, sys
ids = [json.loads(l)['id'] for l in open('$WORK/q.jsonl')]
sys.exit(not (len(ids) == 5 and all('SECRETSIG' not in i and i.startswith('$H/wds/shards/00000.tar:') for i in ids)))"

# ---- S3: s3rver behind the signature-checking front ----
mkdir -p "$WORK/s3data"
store_s3rver "$WORK/s3data" bkt
SPORT=$S3RVER_PORT
store_proxy "http://127.0.0.1:$SPORT" --sigv4 S3RVER:S3RVER
SP=$PROXY_PORT
put() { curl -s -f -o /dev/null --aws-sigv4 aws:amz:us-east-1:s3 --user S3RVER:S3RVER \
        -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -T "$1" "http://127.0.0.1:$SPORT/bkt/$2"; }
for k in 00000 00001 00002; do put "$WORK/www/wds/shards/$k.tar" "shards/$k.tar"; done
put "$WORK/www/wds/shards/00000.tar" "odd%20key%2Bplus/s%C3%A9.tar" # "odd key+plus/sé.tar"
export AWS_ENDPOINT_URL=http://127.0.0.1:$SP AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
"$DH" index 's3://bkt/shards/{00000..00002}.tar' -o "$WORK/s3.jsonl" > "$WORK/sidx.out" 2>&1
check "s3 index: 3 shards, 12 samples" contains "$WORK/sidx.out" "3 tar shards: 12 samples + 0 skipped"
sed -e "s#s3://bkt/##g" -e 's/,"etag":"[^,]*"//' "$WORK/s3.jsonl" > "$WORK/s3.local.jsonl"
check "s3 index: every descriptor as the local index has it" \
    cmp -s "$WORK/s3.local.jsonl" "$WORK/www/wds/manifest.jsonl"
run "$WORK/s3.jsonl" "$WORK/srun.out"
check "s3 run: every sample delivered" contains "$WORK/srun.out" "delivered 12 + failed 0 = 12"
check "s3 run: the same bytes as from the local shards" same_bytes "$WORK/www/wds/manifest.jsonl" "$WORK/s3.jsonl"
# a prefix listed (ListObjectsV2; s3rver answers max-keys with an internal error, so pages
# are tested in test_store)
"$DH" index 's3://bkt/shards/' -o "$WORK/slist.jsonl" > "$WORK/slist.out" 2>&1
check "s3 index of a prefix: its objects listed" contains "$WORK/slist.out" \
    "index: s3://bkt/shards/: 3 objects listed"
check "s3 index of a prefix: the manifest of the shards named one by one" \
    cmp -s "$WORK/slist.jsonl" "$WORK/s3.jsonl"
"$DH" index 's3://bkt' -o "$WORK/sall.jsonl" > "$WORK/sall.out" 2>&1
check "s3 index of a whole bucket: every object at any depth, odd keys too" contains \
    "$WORK/sall.out" "4 tar shards: 17 samples + 0 skipped"
"$DH" index 's3://bkt/nothing/' -o "$WORK/snone.jsonl" > "$WORK/snone.out" 2>&1
check "s3 index of an empty prefix: named" contains "$WORK/snone.out" \
    "index: s3://bkt/nothing/: no objects under this prefix"
"$DH" index 's3://nobkt/' -o "$WORK/snob.jsonl" > "$WORK/snob.out" 2>&1
check "s3 listing of a bucket that is not there: named with S3's code" contains "$WORK/snob.out" \
    "index: cannot list s3://nobkt/: GET s3://nobkt/ (at http://127.0.0.1:$SP, from AWS_ENDPOINT_URL): HTTP 404 NoSuchBucket (no such bucket)"
# a bucket of no media: listed, every object skipped, and no hint to add a '/' (it is a bucket)
curl -s -f -o /dev/null --aws-sigv4 aws:amz:us-east-1:s3 --user S3RVER:S3RVER \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -X PUT "http://127.0.0.1:$SPORT/junk"
curl -s -f -o /dev/null --aws-sigv4 aws:amz:us-east-1:s3 --user S3RVER:S3RVER \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -T "$WORK/urls.txt" "http://127.0.0.1:$SPORT/junk/notes"
"$DH" index 's3://junk' -o "$WORK/sjunk.jsonl" > "$WORK/sjunk.out" 2>&1
check "s3 index of a bucket of no media: nothing indexed, said, without a wrong hint" bash -c \
    "grep -q 'index: nothing indexed' '$WORK/sjunk.out' && ! grep -q 'a prefix to list' '$WORK/sjunk.out'"
check "s3 listing of a bucket that is not there: exit 1, not a usage error" test "$(
    "$DH" index 's3://nobkt/' -o "$WORK/snob.jsonl" > /dev/null 2>&1; echo $?)" -eq 1
"$DH" index 's3://bkt/shards' -o "$WORK/snoslash.jsonl" > "$WORK/snoslash.out" 2>&1
check "s3: a prefix without its '/': the way to list it said" contains "$WORK/snoslash.out" \
    "index: s3://bkt/shards: a prefix to list ends in '/' (s3://bkt/shards/)"
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY "$DH" index 's3://bkt/shards/00000.tar' \
    -o "$WORK/sanon.jsonl" > "$WORK/sanon.out" 2>&1
check "s3 without credentials: refused, and said that nothing was signed" contains "$WORK/sanon.out" \
    "HTTP 403 AccessDenied (access denied: the request was not signed, as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set"
AWS_ENDPOINT_URL=http://127.0.0.1:1 run "$WORK/s3.jsonl" "$WORK/sport.out" --sample-timeout 60
AWS_ENDPOINT_URL=http://127.0.0.1:$NGINX_PORT run "$WORK/s3.jsonl" "$WORK/swrong.out"
check "a run at an endpoint that answers but is not the store refuses to start, named" contains \
    "$WORK/swrong.out" "cannot start the engine: none of the first 3 objects is there: is the store's address (or the bucket) the one they were indexed from?"
(unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
 AWS_ENDPOINT_URL=http://127.0.0.1:$SPORT run "$WORK/s3.jsonl" "$WORK/sanonrun.out")
check "a run without credentials at a store that allows it: said once, every sample delivered" \
    bash -c "grep -c 'requests to S3 are unsigned (anonymous' '$WORK/sanonrun.out' | grep -qx 1 &&
             grep -q 'delivered 12 + failed 0 = 12' '$WORK/sanonrun.out'"
check "a run at a wrong endpoint refuses to start, named (not 60 s a sample)" contains \
    "$WORK/sport.out" "cannot start the engine: the object store does not answer as it should: GET s3://bkt/shards/00000.tar bytes 0-0 (at http://127.0.0.1:1, from AWS_ENDPOINT_URL): .*gave up after 3 attempts (is the address right?)"
AWS_SECRET_ACCESS_KEY=wrong "$DH" index 's3://bkt/shards/' -o "$WORK/slbad.jsonl" > "$WORK/slbad.out" 2>&1
check "s3 listing with a wrong secret: refused, named" contains "$WORK/slbad.out" \
    "index: cannot list s3://bkt/shards/: .*HTTP 403 SignatureDoesNotMatch"
"$DH" index "$H/wds/shards/" -o "$WORK/hdir.jsonl" > "$WORK/hdir.out" 2>&1
check "an HTTP directory: not listed, the ways that work said" contains "$WORK/hdir.out" \
    "index: $H/wds/shards/: an HTTP directory cannot be listed: name its shards"
"$DH" index 's3://bkt/odd key+plus/sé.tar' -o "$WORK/odd.jsonl" > "$WORK/odd.out" 2>&1
check "s3: a key with a space, a plus and UTF-8 is escaped and signed right" contains "$WORK/odd.out" "1 tar shards: 5 samples + 0 skipped"
AWS_SECRET_ACCESS_KEY=wrong "$DH" index 's3://bkt/shards/00000.tar' -o "$WORK/bad.jsonl" > "$WORK/bad.out" 2>&1
check "s3: a wrong secret is refused by the store, named" contains "$WORK/bad.out" \
    "s3://bkt/shards/00000.tar: shard skipped: GET s3://bkt/shards/00000.tar bytes 0-0 (at http://127.0.0.1:$SP, from AWS_ENDPOINT_URL): HTTP 403 SignatureDoesNotMatch"
AWS_SECRET_ACCESS_KEY=wrong run "$WORK/s3.jsonl" "$WORK/sbad.out" --max-failed 1
check "s3: a run with a wrong secret refuses to start, named" contains "$WORK/sbad.out" \
    "cannot start the engine: the object store does not answer as it should: GET s3://bkt/shards/00000.tar bytes 0-0 (at http://127.0.0.1:$SP, from AWS_ENDPOINT_URL): HTTP 403 SignatureDoesNotMatch"
"$DH" index 's3://bkt/shards/nothere.tar' -o "$WORK/snf.jsonl" > "$WORK/snf.out" 2>&1
check "s3: a missing key is named with S3's code" contains "$WORK/snf.out" "HTTP 404 NoSuchKey"
check "no credential in any output" bash -c "! grep -l 'S3RVER\|wrong' '$WORK'/*.out"
AWS_ACCESS_KEY_ID= "$DH" index 's3://bkt/shards/00000.tar' -o "$WORK/half.jsonl" > "$WORK/half.out" 2>&1
check "s3: a secret without its key id is named" contains "$WORK/half.out" \
    "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not"

echo "e2e_store: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
