#!/usr/bin/env python3
"""llm_bridge.py - an example bridge that puts an LLM behind nightshift's agent hook.

The daemon POSTs signed webhook events (experiment.finished, queue.empty,
experiment.rejected; see daemon/hook/hook.h) to an agent and queues whatever spec(s)
the agent answers with. This bridge is such an agent: it verifies the
signature, turns the payload (the best run, the recent results, the spec
defaults, the error of a rejected proposal) into a prompt, runs an LLM through
a command of your choice, pulls a JSON spec out of the reply and answers with
it. Python 3 standard library only.

Run it instead of `nightshift agent`, and point the daemon at it:

    export NIGHTSHIFT_AGENT_SECRET=$(head -c 32 /dev/urandom | base64)
    LLM_CMD="your-llm-cli --some-flag" python3 experiments/bridges/llm_bridge.py \\
        --listen 127.0.0.1:8090
    nightshift serve --agent-url http://127.0.0.1:8090/hook \\
        --agent-secret "$NIGHTSHIFT_AGENT_SECRET"

LLM_CMD is run through the shell with the prompt on stdin; its stdout is the
reply. The first JSON object in the reply (a ```json block if there is one) is
the proposal, laid over the best spec: fields it leaves out keep the best's
values (not the defaults). Try it without an LLM with --dry-run: the bridge then answers
with a fixed small mutation of the best spec (or of the defaults).

Options:
    --listen HOST:PORT   where to listen (default 127.0.0.1:8090)
    --secret S           the shared webhook secret (or --secret-file F, or
                         $NIGHTSHIFT_AGENT_SECRET)
    --dry-run            no LLM: propose a fixed small mutation
    --llm-timeout S      seconds the LLM command may take (default 300)

What the bridge does not do: validate specs. The daemon validates every
proposal; an invalid one comes back as experiment.rejected with the reason,
which the next prompt includes, so the LLM can correct itself. Replies to a
delivery are cached by webhook-id, so a retried delivery gets the same answer.
"""

import argparse
import base64
import copy
import hashlib
import hmac
import http.server
import json
import os
import subprocess
import sys
import threading
import time

TOLERANCE_S = 300  # largest accepted |now - webhook-timestamp|
MAX_BODY = 16 << 20

# --dry-run: the first of these that the recent runs have not tried is proposed.
DRY_RUN_EDITS = [
    ("ve_layers=all", ("model", "ve_layers"), "all"),
    ("mlp=swiglu", ("model", "mlp"), "swiglu"),
    ("window_pattern=SL", ("model", "window_pattern"), "SL"),
    ("depth=5", ("model", "depth"), 5),
]

PROMPT = """You are choosing the next experiment for an automated search over small GPT
language models trained on a CPU for a fixed wall-clock budget. The metric is
val_bpb (validation bits per byte): lower is better.

Event: {event}
{rejected}
Best run so far:
{best}

Recent runs (newest first):
{recent}

Every spec field with its default value:
{defaults}

Propose ONE new experiment that is likely to beat the best. Change one or two
fields of the best spec (model shape, learning rates, batch size, ...), keep
the rest. Do not repeat a spec that was already run. Rules: model.n_head must
divide model.n_embd, model.n_kv_head must divide model.n_head, the head
dimension n_embd/n_head must be even, model.ve_gate_channels <= model.n_embd,
train.total_batch_tokens must be a multiple of train.batch_size *
model.seq_len. Unknown fields are errors.

Answer with the spec as one JSON object in a ```json block, with a short
"name" saying what changed, and nothing else after it.
"""


def log(msg):
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(f"{stamp} llm_bridge: {msg}", file=sys.stderr, flush=True)


def verify(secret, headers, body):
    """Standard Webhooks: v1,<base64 HMAC-SHA256(secret, id.timestamp.body)>."""
    msg_id = headers.get("webhook-id")
    ts = headers.get("webhook-timestamp")
    sigs = headers.get("webhook-signature")
    if not msg_id or not ts or not sigs:
        return "missing webhook headers"
    if not ts.isdigit() or abs(int(ts) - time.time()) > TOLERANCE_S:
        return "stale or malformed webhook-timestamp"
    mac = hmac.new(secret, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    want = "v1," + base64.b64encode(mac).decode()
    for sig in sigs.split(" "):
        if hmac.compare_digest(sig.encode(), want.encode()):
            return None
    return "no valid signature"


def summarize(run):
    if not run:
        return "none"
    parts = [f"#{run.get('id')}", str(run.get("name")), str(run.get("status", "succeeded"))]
    if run.get("val_bpb") is not None:
        parts.append(f"val_bpb {run['val_bpb']:.4f}")
    if run.get("reason"):
        parts.append(f"({run['reason']})")
    return " ".join(parts)


def make_prompt(event):
    best = event.get("best")
    rejected = event.get("rejected")
    rej = ""
    if rejected:
        rej = (f"\nYour previous proposal was REJECTED by the daemon ({rejected.get('code')}): "
               f"{rejected.get('error')}\nProposal was: {json.dumps(rejected.get('proposal'))}\n")
    recent = "\n".join(
        f"  {summarize(r)}: {json.dumps(r.get('spec'), sort_keys=True)}"
        for r in event.get("recent") or []) or "  none"
    best_text = "none yet" if not best else (
        f"{summarize(best)}\n{json.dumps(best.get('spec'), indent=1, sort_keys=True)}")
    return PROMPT.format(event=event.get("type"), rejected=rej, best=best_text, recent=recent,
                         defaults=json.dumps(event.get("defaults"), sort_keys=True))


def extract_spec(reply):
    """The first JSON object in the reply, preferring a ```json block."""
    start = reply.find("```json")
    text = reply[start + 7:] if start >= 0 else reply
    dec = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch != "{":
            continue
        try:
            obj, _ = dec.raw_decode(text[i:])
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def strip(spec):
    """A spec without the fields that label it rather than define it."""
    return {k: v for k, v in (spec or {}).items() if k not in ("name", "tags", "parent", "priority")}


def base_spec(event):
    """The best spec (or the defaults) without its labels, and the best's id."""
    best = event.get("best") or {}
    return strip(copy.deepcopy(best.get("spec") or event.get("defaults"))), best.get("id")


def dry_run(event):
    spec, parent = base_spec(event)
    tried = [strip(r.get("spec")) for r in event.get("recent") or []]
    for label, (section, field), value in DRY_RUN_EDITS:
        cand = copy.deepcopy(spec)
        cand.setdefault(section, {})[field] = value
        if cand == spec or cand in tried:
            continue
        cand.update(name=f"dry-run {label}", tags=["llm-bridge", "dry-run"])
        if parent:
            cand["parent"] = parent
        return cand
    return []


def ask_llm(event, cmd, timeout):
    prompt = make_prompt(event)
    try:
        out = subprocess.run(cmd, shell=True, input=prompt, capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        log(f"the LLM command took more than {timeout} s")
        return []
    if out.returncode != 0:
        log(f"the LLM command exited {out.returncode}: {out.stderr.strip()[-500:]}")
        return []
    spec = extract_spec(out.stdout)
    if spec is None:
        log("no JSON object in the LLM's reply")
        return []
    base, parent = base_spec(event)
    spec = merge(base, spec)
    spec.setdefault("tags", ["llm-bridge"])
    if parent and "parent" not in spec:
        spec["parent"] = parent
    return spec


def merge(base, change):
    """base with change laid over it, section by section."""
    out = copy.deepcopy(base)
    for k, v in change.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class Bridge(http.server.BaseHTTPRequestHandler):
    server_version = "nightshift-llm-bridge"
    secret = b""
    dry = False
    llm_cmd = None
    llm_timeout = 300
    replies = {}  # webhook-id -> reply bytes
    lock = threading.Lock()

    def answer(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        return data

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            self.answer(413, {"error": {"code": "too_large", "message": "body too large"}})
            return
        body = self.rfile.read(n)
        why = verify(self.secret, self.headers, body)
        if why:
            log(f"refusing a delivery: {why}")
            self.answer(401, {"error": {"code": "unauthorized", "message": why}})
            return
        msg_id = self.headers["webhook-id"]
        with self.lock:
            if msg_id in self.replies:
                data = self.replies[msg_id]
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            try:
                event = json.loads(body)
            except ValueError:
                self.answer(400, {"error": {"code": "invalid_json", "message": "not JSON"}})
                return
            kind = event.get("type")
            busy = kind == "experiment.finished" and (event.get("queue_depth") or 0) > 0
            if kind not in ("experiment.finished", "queue.empty", "experiment.rejected") or busy:
                reply = []
            elif self.dry:
                reply = dry_run(event)
            else:
                reply = ask_llm(event, self.llm_cmd, self.llm_timeout)
            log(f"{kind}: proposing {json.dumps(reply)[:300]}")
            self.replies[msg_id] = self.answer(200, reply)

    def log_message(self, fmt, *args):
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", default="127.0.0.1:8090")
    ap.add_argument("--secret")
    ap.add_argument("--secret-file")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--llm-timeout", type=float, default=300)
    args = ap.parse_args()
    secret = args.secret
    if args.secret_file:
        with open(args.secret_file) as f:
            secret = f.read().rstrip("\r\n ")
    secret = secret or os.environ.get("NIGHTSHIFT_AGENT_SECRET")
    if not secret:
        ap.error("a secret is required (--secret, --secret-file or NIGHTSHIFT_AGENT_SECRET)")
    if not args.dry_run and not os.environ.get("LLM_CMD"):
        ap.error("set LLM_CMD to the command that runs your LLM, or use --dry-run")
    Bridge.secret = secret.encode()
    Bridge.dry = args.dry_run
    Bridge.llm_cmd = os.environ.get("LLM_CMD")
    Bridge.llm_timeout = args.llm_timeout
    host, _, port = args.listen.rpartition(":")
    srv = http.server.ThreadingHTTPServer((host, int(port)), Bridge)
    print(f"listening on http://{host}:{srv.server_address[1]}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    srv.server_close()


if __name__ == "__main__":
    main()
