#!/usr/bin/env bash
# report_chromium.sh - `datahelix report` as a person sees it: the page headless Chromium
# renders (--dump-dom: the DOM it built; --screenshot: the picture), its drawn elements
# checked against the JSON they come from (every bar's value is the median of its runs),
# the timeline's waits against the trace, and the mistakes users make (a file that is no
# result, no -o, a damaged trace).
#   usage: report_chromium.sh PATH/TO/datahelix
set -u
DH=${1:?usage: report_chromium.sh DATAHELIX}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dhreport.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
source "$(dirname "$0")/lib.sh"
PY=$(command -v /usr/bin/python3 || command -v python3)

"$DH" gen --workload kinetics-clips --out "$WORK/data" --samples 24 -q > /dev/null 2>&1
M="$WORK/data/manifest.jsonl"
RUN=(--manifest "$M" --workload kinetics-clips --ranks 2 --workers 2 --batch 8 --steps 9 -q)
for p in helix local; do
    "$DH" run "${RUN[@]}" --policy $p --json "$WORK/real-$p.json" \
        > /dev/null 2>&1
    "$DH" sim "${RUN[@]}" --policy $p --json "$WORK/sim-$p.json" > /dev/null 2>&1
done
"$DH" run "${RUN[@]}" --policy helix --trace "$WORK/trace.json" --json "$WORK/traced.json" \
    > /dev/null 2>&1
"$DH" bench --mode sim --workloads omni-mix --policies helix,pool --steps 40 --repeats 3 \
    --json "$WORK/bench.json" > "$WORK/bench.out" 2>&1
check "bench writes its report beside its JSON" test -s "$WORK/bench.html"
check "... and says where" contains "$WORK/bench.out" "report: $WORK/bench.html"
"$DH" report "$WORK"/real-*.json "$WORK"/sim-*.json "$WORK/bench.json" \
    --trace "$WORK/trace.json" -o "$WORK/report.html" > "$WORK/report.out" 2>&1
check "report exits 0" test $? -eq 0
check "report says where" contains "$WORK/report.out" "report: $WORK/report.html"
check "self-contained: no script, no link, no remote reference" \
    test "$(grep -Ec '<script|<link|src=|https?://' "$WORK/report.html")" -eq 0

if ! command -v chromium > /dev/null; then
    check "chromium is installed (scripts/deps.sh)" false
else
    chrome() { timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
        --user-data-dir="$WORK/profile" "$@" 2> "$WORK/chromium.err"; }
    chrome --dump-dom "file://$WORK/report.html" > "$WORK/dom.html"
    check "Chromium renders the page" contains "$WORK/dom.html" "DataHelix report"
    chrome --window-size=1280,2400 --screenshot="$WORK/shot.png" "file://$WORK/report.html" \
        > /dev/null
    check "a screenshot of it" test "$(head -c 8 "$WORK/shot.png" | od -An -tx1 | tr -d ' ')" = \
        89504e470d0a1a0a
    check "... with something drawn (over 20 KB of PNG)" test "$(stat -c %s "$WORK/shot.png")" -gt 20000
    "$PY" - "$WORK" << 'PYEOF' || { fail=$((fail + 1)); echo "FAIL: the drawn numbers are the JSON's"; }
import json, re, statistics, sys
from html.parser import HTMLParser
work = sys.argv[1]
class Els(HTMLParser):
    def __init__(self):
        super().__init__(); self.els = []
    def handle_starttag(self, tag, attrs):
        self.els.append((tag, dict(attrs)))
p = Els(); p.feed(open(work + "/dom.html").read())
bars = [a for t, a in p.els if t == "rect" and a.get("class") == "bar"]
runs = []
for f in ("real-helix", "real-local", "sim-helix", "sim-local"):
    runs.append(json.load(open("%s/%s.json" % (work, f))))
bench = json.load(open(work + "/bench.json"))
runs += bench["runs"]
keys = {"throughput": "throughput_sps", "efficiency": "efficiency", "miss": "miss_rate",
        "wait_p95": "wait_p95_ms", "stall_p95": "stall_p95_ms"}
groups = {}
for r in runs:
    groups.setdefault((r["workload"], r["policy"], r["engine"]), []).append(r)
# one bar per group and metric, and nothing else
assert len(bars) == 5 * len(groups), (len(bars), len(groups))
for (wl, pol, eng), rs in groups.items():
    for m, k in keys.items():
        vals = sorted((100 if m == "miss" else 1) * r[k] for r in rs)
        want = vals[(len(vals) - 1) // 2]  # of an even count the lower middle, as bench
        got = [b for b in bars if b["data-workload"] == wl and b["data-policy"] == pol and
               b["data-engine"] == eng and b["data-metric"] == m]
        assert len(got) == 1, (wl, pol, eng, m, len(got))
        v = float(got[0]["data-value"])
        assert abs(v - want) <= 1e-5 * max(1.0, abs(want)), (wl, pol, eng, m, v, want)
        assert int(got[0]["data-runs"]) == len(rs)
        if len(rs) > 1:  # the range over repeats
            lo = min((100 if m == "miss" else 1) * r[k] for r in rs)
            assert abs(float(got[0]["data-lo"]) - lo) <= 1e-5 * max(1.0, abs(lo))
# a wait distribution per policy and engine, through the run's own percentiles
lines = [a for t, a in p.els if t == "polyline" and a.get("class") == "cdfline"]
assert len(lines) == len(groups), (len(lines), len(groups))
h = json.load(open(work + "/real-helix.json"))
hl = [a for a in lines if a["data-policy"] == "helix" and float(a["data-p95"]) == float("%.6g" % h["wait_p95_ms"])]
assert hl, "the helix line carries its p95"
# the timeline: one lane per rank and worker, each wait named with its worker and sample
tl = [a for t, a in p.els if t == "svg" and a.get("class") == "timeline"]
assert len(tl) == 1 and tl[0]["data-ranks"] == "2" and tl[0]["data-workers"] == "2", tl
bub = [a for t, a in p.els if t == "rect" and a.get("class") == "bubble"]
assert sum(int(b["data-count"]) for b in bub) == int(tl[0]["data-bubbles"]), tl[0]["data-bubbles"]
for b in bub:
    assert float(b["data-ms"]) > 0 and 0 <= int(b["data-worker"]) < 2 and int(b["data-rank"]) < 2
# every wait the engine traced is there, the longest among them (step 0's last rank was
# left out when waits were guessed from gaps between computes)
waits = [json.loads(l.rstrip(",\n")) for l in open(work + "/trace.json") if '"wait for data"' in l]
assert len(waits) == int(tl[0]["data-bubbles"]) and waits, (len(waits), tl[0]["data-bubbles"])
longest = max(w["dur"] for w in waits) / 1e3
assert any(abs(float(b["data-ms"]) - longest) < 1e-3 for b in bub), longest
# every run in the configuration table, with its ordered bound
rows = [a for t, a in p.els if t == "tr" and a.get("class") == "run"]
assert len(rows) == len(runs) + len(bench.get("sim_predictions", []))
want = sorted(float("%.6g" % r["bound_ordered_s"]) for r in runs + bench.get("sim_predictions", []))
assert sorted(float(a["data-ordered"]) for a in rows) == want, "ordered bounds"
print("report: %d bars, %d wait lines, %d waits on the timeline match their JSON" % (len(bars), len(lines), len(bub)))
PYEOF
fi

# the mistakes users make
echo '{"hello": 1}' > "$WORK/other.json"
"$DH" report "$WORK/other.json" -o "$WORK/x.html" > /dev/null 2> "$WORK/e1"
check "a JSON that is no result: exit 1" test $? -eq 1
check "... naming the file" contains "$WORK/e1" "other.json: not a DataHelix result"
check "... and no page left behind" test ! -e "$WORK/x.html"
"$DH" report "$WORK/real-helix.json" > /dev/null 2> "$WORK/e2"
check "no -o: a usage error" test $? -eq 2
head -c 300 "$WORK/real-helix.json" > "$WORK/cut.json"
"$DH" report "$WORK/cut.json" -o "$WORK/x.html" > /dev/null 2> "$WORK/e3"
check "a cut JSON: named with its line" grep -q "cut.json:1:" "$WORK/e3"
{ head -n 20 "$WORK/trace.json"; echo '{"ph":"X","pid":2,"tid":"zero"}'; } > "$WORK/bad-trace.json"
"$DH" report "$WORK/real-helix.json" --trace "$WORK/bad-trace.json" -o "$WORK/x.html" \
    > /dev/null 2> "$WORK/e4"
check "a damaged trace: its line named" contains "$WORK/e4" "bad-trace.json:21: not an event"
"$DH" report "$WORK/real-helix.json" --trace "$WORK/real-helix.json" -o "$WORK/x.html" \
    > /dev/null 2> "$WORK/e5"
check "a result given as the trace: said" contains "$WORK/e5" "no rank computed in this trace"
cp "$WORK/real-helix.json" "$WORK/keep.json"
"$DH" report "$WORK/keep.json" -o "$WORK/keep.json" > /dev/null 2> "$WORK/e6"
check "-o an input: refused" contains "$WORK/e6" "is one of the inputs: it would be overwritten"
check "... the input intact" cmp -s "$WORK/keep.json" "$WORK/real-helix.json"
timeout 20 "$DH" report "$WORK/real-helix.json" --trace /dev/zero -o "$WORK/x.html" \
    > /dev/null 2> "$WORK/e7"
check "a device as the trace: refused at once, not read forever" test $? -eq 1
check "... saying so" contains "$WORK/e7" "/dev/zero is not a regular file"
"$DH" report "$WORK/none.json" -o "$WORK/x.html" > /dev/null 2> "$WORK/e8"
check "a missing result: named with the reason" contains "$WORK/e8" "none.json: No such file"
echo "report_chromium: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
