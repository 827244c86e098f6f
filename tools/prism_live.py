#!/usr/bin/env python3
# tools/prism_live.py: the live view of a run or a whole study in TensorBoard and Weights & Biases (docs/live.md).
#
#   python3 tools/prism_live.py runs/tiny --tensorboard runs/tb &  tensorboard --logdir runs/tb
#   python3 tools/prism_live.py runs/tiny --wandb --wandb-mode offline     # then: wandb sync wandb/offline-run-*
#   python3 tools/prism_live.py runs/x --tensorboard runs/tb --once         # what is there now, then exit
#
# DIR is a run directory (train_prism -o OUT: it holds log.jsonl or run.json) or a study directory (its
# subdirectories that hold one are its runs, found as they appear). Each run's OUT/log.jsonl is tailed: the lines
# appended since the last look are logged as scalars at their step; OUT/run.json (run/run_record.h) gives the
# run's flags, model and per-layer widths and heads as hyper-parameters; OUT/eval.json (eval_zeroshot --json) gives
# the zero-shot scores when it appears. A log that does not exist yet is waited for. When a --resume rewrites the
# log (it keeps the steps up to its checkpoint, run/run_dir.h's truncate_log), a line for a step already logged
# with other text marks the branch point P: TensorBoard drops its steps >= P (a SessionLog START at P, its own
# restart mechanism), and W&B, whose history cannot be rewound, goes on in a new run named "NAME@P" that holds the
# rewritten log from its first step.
# Without --once a run is followed until its record says the invocation ended (done, stopped, interrupted,
# diverged) and nothing changed for a few seconds, a study until Ctrl-C (SIGINT or SIGTERM: a last pass, then
# the writers are closed). Each library is imported only when asked for, through its own writer
# (tensorboard's EventFileWriter and summary protos; wandb.init and run.log) and nothing else.
# A line or file the bridge cannot turn into finite numbers is skipped with a warning, whatever Python raises
# (not JSON, nesting past its recursion limit, 10^400, an integer past its digit limit); in a study, a run whose
# files cannot be read (a log that is not a regular file) is skipped with a warning and the others go on.
# Does not: write into a run directory, run anything found in one (the files are read as JSON), or need a network
# (--wandb-mode offline).
import argparse
import datetime
import hashlib
import json
import math
import os
import re
import signal
import stat
import sys
import time

PROG = "prism_live"

# log.jsonl's fields (run/run.h's log_step) and the scalar each becomes; any other number is logged as log/KEY.
STEP_TAGS = {
    "train_loss": "train/loss",
    "val_loss": "val/loss",
    "lr": "train/lr",
    "grad_norm": "train/grad_norm",
    "tokens": "train/tokens",
    "tokens_per_s": "perf/tokens_per_s",
    "elapsed_s": "perf/elapsed_s",
    "mfu": "perf/mfu",
}
MAX_LINE = 1 << 20  # a longer "line" is not one the trainer writes (run/run_dir.h's kMaxLogLine)
MAX_JSON = 64 << 20  # run.json and eval.json are a few KB


class UserError(Exception):
    """A one-line error for the user: printed as `prism_live: error: ...`, exit status 1."""


def note(msg):
    print(f"{PROG}: {msg}", flush=True)


def warn(msg):
    print(f"{PROG}: warning: {msg}", file=sys.stderr, flush=True)


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def not_finite(obj):
    """The first number in obj (nested lists and dicts) that is no finite float: NaN, Infinity, an integer past
    float's range (10^400); None when every one is finite. Such a value cannot be logged as a scalar."""
    if is_number(obj):
        try:
            return None if math.isfinite(float(obj)) else obj
        except OverflowError:
            return obj
    for v in obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list) else ():
        bad = not_finite(v)
        if bad is not None:
            return bad
    return None


def unreadable(e):
    """Why Python could not read a text as JSON of finite numbers, in one line (whatever it raised)."""
    first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def shown(v):
    """A number for a one-line message: at most 40 characters of it."""
    t = repr(v)
    return t if len(t) <= 40 else t[:20] + f"...({len(t)} digits)"


def scalars_of(obj):
    """A log line's scalars: {tag: value}; null (a non-finite value) is left out."""
    out = {}
    for key, v in obj.items():
        if key == "step":
            continue
        if is_number(v):
            out[STEP_TAGS.get(key, "log/" + key)] = float(v)
        elif key == "skipped" and v is True:
            out["train/skipped"] = 1.0
        elif key == "layers" and isinstance(v, dict):  # per-layer signals (--layer-stats-every): layers/KIND/LNN
            for kind, values in v.items():
                if isinstance(values, list):
                    for l, x in enumerate(values, start=1):  # layer 1 is L01, as everywhere else
                        if is_number(x):
                            out[layer_tag(kind, l)] = float(x)
        elif key == "eval" and isinstance(v, dict):  # an in-training eval (--eval-every)
            task = v.get("task") if isinstance(v.get("task"), str) else "?"
            for m, x in v.items():
                if is_number(x):
                    out[f"eval/{task}/{m}"] = float(x)
    return out


def layer_tag(kind, layer):
    """The tag of per-layer signal KIND of layer `layer` (from 1): layers/grad_rms/L01. Zero-padded to two digits,
    so that TensorBoard's sorted tag list and W&B's panels keep layer order up to 99 layers."""
    return f"layers/{kind}/L{layer:02d}"


def open_regular(path):
    """The file at path opened for reading, or None when there is none; a link, FIFO or device is refused (never
    followed or waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror} (a link or something not a regular file is not read)")
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UserError(f"{path} is not a regular file: a run directory's files are never waited on or followed")
    return os.fdopen(fd, "rb")


def read_json_file(path):
    """(parsed JSON, raw bytes, why) of a small JSON file: (None, None, None) when there is none; (None, raw, why)
    when it is not whole JSON or holds a number that is not finite (the caller warns once per version)."""
    f = open_regular(path)
    if f is None:
        return None, None, None
    with f:
        raw = f.read(MAX_JSON + 1)
    if len(raw) > MAX_JSON:
        warn(f"{path} is over {MAX_JSON >> 20} MiB: not a run's file, not read")
        return None, None, None
    try:
        obj = json.loads(raw)
        bad = not_finite(obj)
    except Exception as e:  # not JSON, an integer of over 4300 digits, nesting past Python's recursion limit, ...
        return None, raw, f"it cannot be read as JSON of finite numbers ({unreadable(e)})"
    if bad is not None:
        return None, raw, f"it holds {shown(bad)}, not a finite number"
    return obj, raw, None


class LogTail:
    """Follows one log.jsonl: the whole lines added since the last look, as parsed objects. A rewritten log (another
    file at the path, or a shorter one) is read again from its start (reopened)."""

    def __init__(self, path):
        self.path = path
        self.ident = None  # (st_dev, st_ino) of the file being read
        self.offset = 0  # bytes consumed: the end of the last whole line
        self.line_no = 0
        self.last_step = 0  # in this file
        self.partial = False  # bytes after the last newline (being written, or torn by a crash)

    def poll(self):
        """[(step, obj, line_text)] for the new whole lines. The file is read MAX_LINE bytes at a time, and a line
        is held only while it is at most MAX_LINE long: a log of any size (a 3 GB sparse one) costs a few MiB."""
        f = open_regular(self.path)
        if f is None:
            return []
        out = []
        with f:
            st = os.fstat(f.fileno())
            ident = (st.st_dev, st.st_ino)
            if ident != self.ident or st.st_size < self.offset:
                self.ident, self.offset, self.line_no, self.last_step = ident, 0, 0, 0
            f.seek(self.offset)
            left, pos = st.st_size - self.offset, self.offset  # pos: the file offset of the chunk's first byte
            held, overlong = b"", False  # the line so far (when not overlong)
            while left > 0:
                chunk = f.read(min(MAX_LINE, left))
                if not chunk:
                    break
                left -= len(chunk)
                start = 0
                while True:
                    nl = chunk.find(b"\n", start)
                    if nl < 0:
                        break
                    self.line_no += 1
                    if overlong:
                        warn(f"{self.path} line {self.line_no} is over {MAX_LINE >> 20} MiB: not a step's JSON, skipped")
                    else:
                        rec = self._parse(held + chunk[start:nl])
                        if rec:
                            out.append(rec)
                    held, overlong, start = b"", False, nl + 1
                    self.offset = pos + start
                if not overlong:
                    held += chunk[start:]
                    overlong = len(held) > MAX_LINE
                    if overlong:
                        held = b""
                pos += len(chunk)
        self.partial = bool(held)
        if overlong:  # not a line the trainer writes: skipped, not held forever
            warn(f"{self.path} line {self.line_no + 1} is over {MAX_LINE >> 20} MiB without an end: skipped")
            self.offset, self.partial = pos, False
        return out

    def _parse(self, raw):
        where = f"{self.path} line {self.line_no}"
        if not raw.strip():
            return None
        if len(raw) > MAX_LINE:
            warn(f"{where} is over {MAX_LINE >> 20} MiB: not a step's JSON, skipped")
            return None
        try:
            text = raw.decode("utf-8")
            obj = json.loads(text)
            bad = not_finite(obj)
        except ValueError:
            warn(f"{where} is not whole JSON: skipped")
            return None
        except Exception as e:  # whatever else Python raises (RecursionError: nesting ~1000 deep)
            warn(f"{where} cannot be read as JSON of finite numbers ({unreadable(e)}): skipped")
            return None
        if bad is not None:
            warn(f"{where} holds {shown(bad)}, not a finite number: skipped")
            return None
        step = obj.get("step") if isinstance(obj, dict) else None
        if not is_number(step) or step != math.floor(step) or step < 1 or step > 1e15:
            warn(f'{where} is not a step\'s JSON (no "step" that is a whole number >= 1): skipped')
            return None
        step = int(step)
        if step <= self.last_step:
            warn(f"{where}: step {step} does not follow step {self.last_step} (a duplicated or reordered line): "
                 "skipped")
            return None
        for k in STEP_TAGS:
            if k in obj and obj[k] is not None and not is_number(obj[k]):
                warn(f'{where}: "{k}" is not a number: skipped')
                return None
        self.last_step = step
        return step, obj, text


def record_lines(path, below):
    """The steps < below of the log at path, read again from its start (for a W&B run that starts at a branch)."""
    tail = LogTail(path)
    return [r for r in tail.poll() if r[0] < below]


def flag_value(v):
    """A recorded flag's text as a number where it is a finite one (so that sweeps compare), else the text (1 and
    400 zeros, 5000 digits: past float's range or Python's digit limit)."""
    try:
        x = int(v) if re.fullmatch(r"[+-]?\d+", v) else float(v)
        return x if math.isfinite(float(x)) else v
    except (ValueError, OverflowError):
        return v


def config_of(record):
    """The run record as a nested config: args (flags without dashes), model (with the per-layer table), plan."""
    cfg = {}
    args = record.get("args")
    if isinstance(args, list):
        cfg["args"] = {
            a[0].lstrip("-"): flag_value(a[1])
            for a in args
            if isinstance(a, list) and len(a) == 2 and all(isinstance(x, str) for x in a)
        }
    for k in ("model", "plan"):
        if isinstance(record.get(k), dict):
            cfg[k] = record[k]
    return cfg


def layer_columns(layers):
    """The per-layer column names run.json's model "layers" hold (run/run_record.h writes every column the model
    has), in their first order, "layer" first: the bridge keeps no list of its own."""
    cols = ["layer"]
    for layer in layers:
        if isinstance(layer, dict):
            cols += [k for k in layer if k not in cols]
    return cols


def flat_hparams(cfg):
    """The config as flat hyper-parameters (TensorBoard's hparams take numbers, strings and booleans): args/FLAG,
    model/KEY, layer/NN/COLUMN for every numeric per-layer column, plan/KEY."""
    out = {}
    for section in ("args", "model", "plan"):
        for k, v in cfg.get(section, {}).items():
            if k == "layers" and isinstance(v, list):
                for layer in v:
                    if isinstance(layer, dict) and is_number(layer.get("layer")):
                        for f in layer_columns(v)[1:]:
                            if is_number(layer.get(f)):
                                out[f"layer/{int(layer['layer']):02d}/{f}"] = layer[f]
            elif isinstance(v, (bool, str)) or is_number(v):
                out[f"{section}/{k}"] = v
    return out


def config_markdown(cfg):
    """The config as Markdown tables (TensorBoard's text dashboard)."""
    lines = ["| flag | value |", "|---|---|"]
    lines += [f"| --{k} | {v} |" for k, v in cfg.get("args", {}).items()]
    model = cfg.get("model", {})
    layers = model.get("layers") if isinstance(model.get("layers"), list) else []
    if layers:
        cols = layer_columns(layers)
        lines += ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for layer in layers:
            if isinstance(layer, dict):
                # null: a column of a sub-block the layer lacks, "-" as the trainer's tables show it
                cells = ("-" if layer.get(k, "") is None else str(layer.get(k, "")) for k in cols)
                lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_utc(s):
    try:
        return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc).timestamp()
    except (TypeError, ValueError):
        return None


# ---- the writers: one object per library, one handle per run ------------------------------------------------------


class TensorBoardSink:
    """TensorBoard through its own event writer (tensorboard.summary.writer) and summary protos: LOGDIR/NAME per run."""

    def __init__(self, logdir):
        try:
            from tensorboard.compat.proto import event_pb2, summary_pb2
            from tensorboard.plugins.hparams import summary_v2 as hparams
            from tensorboard.plugins.text import summary_v2 as text
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError as e:
            raise UserError(f"--tensorboard needs the tensorboard package ({e}): pip install tensorboard")
        self.event_pb2, self.summary_pb2, self.hparams, self.text = event_pb2, summary_pb2, hparams, text
        self.EventFileWriter = EventFileWriter
        self.logdir = logdir

    def open(self, run):
        return TensorBoardRun(self, os.path.join(self.logdir, run.name))


class TensorBoardRun:
    def __init__(self, sink, path):
        self.sink, self.path = sink, path
        try:
            self.writer = sink.EventFileWriter(path, flush_secs=5)
        except OSError as e:
            raise UserError(f"--tensorboard: cannot write {path}: {e.strerror}")
        # A restart at step 0: what an earlier bridge wrote for this run is dropped (the log is logged again whole).
        self._purge(0)

    def _add(self, **kw):
        self.writer.add_event(self.sink.event_pb2.Event(**kw))

    def _purge(self, step):
        SessionLog = self.sink.event_pb2.SessionLog
        self._add(step=step, wall_time=time.time(), session_log=SessionLog(status=SessionLog.START))

    def config(self, cfg, start_time):
        hp = flat_hparams(cfg)
        if hp:
            summary = self.sink.hparams.hparams_pb(hp, start_time_secs=start_time)
            self._add(step=0, wall_time=time.time(), summary=summary)
        self._add(step=0, wall_time=time.time(), summary=self.sink.text.text_pb("config", config_markdown(cfg)))

    def scalars(self, step, values, wall_time):
        # simple_value, the scalar form every TensorBoard reader returns (EventAccumulator.Scalars, and the
        # dashboards' plugin_event_accumulator, which migrates it); one event per step holds all of them.
        Summary = self.sink.summary_pb2.Summary
        if values:
            value = [Summary.Value(tag=tag, simple_value=v) for tag, v in values.items()]
            self._add(step=step, wall_time=wall_time, summary=Summary(value=value))

    def branch(self, step, earlier):
        self._purge(step)  # the steps >= step are those of the abandoned branch; earlier ones stay as they are

    def final_eval(self, step, values):
        self.scalars(step, values, time.time())

    def flush(self):
        self.writer.flush()

    def close(self):
        self.writer.close()

    def describe(self):
        return f"TensorBoard {self.path}"


class WandbSink:
    """Weights & Biases through wandb.init and run.log: one W&B run per run (per branch), grouped by study."""

    def __init__(self, project, mode, wandb_dir, entity):
        try:
            import wandb
        except ImportError as e:
            raise UserError(f"--wandb needs the wandb package ({e}): pip install wandb")
        self.wandb, self.project, self.mode, self.dir, self.entity = wandb, project, mode, wandb_dir, entity

    def open(self, run):
        return WandbRun(self, run)


class WandbRun:
    def __init__(self, sink, run):
        self.sink, self.name, self.group, self.cfg = sink, run.name, run.group, {}
        self.run = self._init()

    def _init(self):
        w = self.sink.wandb
        kw = dict(project=self.sink.project, name=self.name, group=self.group, reinit="create_new")
        if self.sink.mode:
            kw["mode"] = self.sink.mode
        if self.sink.dir:
            os.makedirs(self.sink.dir, exist_ok=True)
            kw["dir"] = self.sink.dir
        if self.sink.entity:
            kw["entity"] = self.sink.entity
        try:
            # console off: the bridge's own output is not the run's
            return w.init(settings=w.Settings(console="off", silent=True), **kw)
        except Exception as e:  # wandb raises its own types (UsageError, CommError, ...): one line, what to do
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(
                f"wandb.init failed for {self.name}: {first}; offline: --wandb-mode offline (wandb sync later), "
                f"online: wandb login"
            )

    def config(self, cfg, start_time):
        self.cfg = cfg
        self.run.config.update(cfg, allow_val_change=True)

    def scalars(self, step, values, wall_time):
        self.run.log(values, step=step)

    def branch(self, step, earlier):
        """W&B's history only grows: the rewritten log goes on in a new run NAME@step, from its first line."""
        self.run.finish()
        self.name = f"{self.name.split('@')[0]}@{step}"
        self.run = self._init()
        if self.cfg:
            self.run.config.update(self.cfg, allow_val_change=True)
        for s, obj, _ in earlier:
            self.run.log(scalars_of(obj), step=s)

    def final_eval(self, step, values):
        for k, v in values.items():
            self.run.summary[k] = v

    def flush(self):
        pass

    def close(self):
        self.run.finish()

    def describe(self):
        d = getattr(self.run, "dir", "") or ""
        offline = getattr(self.run.settings, "mode", "") == "offline" or self.sink.mode == "offline"
        where = os.path.dirname(d.rstrip("/")) if d else ""
        tail = f" (offline: {where}; upload: wandb sync {where})" if offline and where else ""
        return f"W&B run {self.name}{tail}"


# ---- one run directory -----------------------------------------------------------------------------------------


class Run:
    def __init__(self, path, name, group, sinks, outputs):
        for flag, out in outputs:  # what the bridge writes never lands in a run directory
            if (os.path.realpath(out) + "/").startswith(os.path.realpath(path) + "/"):
                raise UserError(f"{flag} {out} is inside the run directory {path}: pass a directory beside it")
        self.path, self.name, self.group, self.sinks = path, name, group, sinks
        self.tail = LogTail(os.path.join(path, "log.jsonl"))
        self.handles = None  # opened on the first thing to log
        self.logged = {}  # step -> digest of the line logged for it
        self.record_raw = self.eval_raw = None
        self.record = None
        self.changed_at = time.monotonic()
        self.said = set()
        self.ended_said = None  # the record whose end was noted
        self.progress_at = 0.0
        self.failed = None  # why its last look failed (a study warns once and goes on with its other runs)

    def _open(self):
        if self.handles is None:
            self.handles = [s.open(self) for s in self.sinks]
            for h in self.handles:
                note(f"{self.name}: {h.describe()}")

    def _each(self, fn):
        for h in self.handles:
            fn(h)

    def _wall_time(self, step, obj):
        """When the step ended: its invocation's start (run.json) plus its elapsed_s; else now."""
        inv = self.record.get("invocations") if isinstance(self.record, dict) else None
        el = obj.get("elapsed_s")
        if isinstance(inv, list) and is_number(el):
            start = None
            for i in inv:
                if isinstance(i, dict) and is_number(i.get("start_step")) and i["start_step"] < step:
                    start = parse_utc(i.get("started"))
            if start is not None:
                return start + el
        return time.time()

    def status(self):
        """The latest invocation's status in run.json; "running" until it has ended, and without a record."""
        inv = self.record.get("invocations") if isinstance(self.record, dict) else None
        last = inv[-1] if isinstance(inv, list) and inv and isinstance(inv[-1], dict) else {}
        return last.get("status", "") if last.get("ended") is not None else "running"

    def poll(self):
        """One look at the run directory; True when anything was logged."""
        did = False
        rec, raw, why = read_json_file(os.path.join(self.path, "run.json"))
        if raw is not None and raw != self.record_raw:
            self.record_raw, self.changed_at = raw, time.monotonic()
            if why:
                warn(f"{self.path}/run.json: {why}: its config is not logged")
            elif not isinstance(rec, dict) or rec.get("prism_run") != 1:
                warn(f"{self.path}/run.json is not a run record (version 1): its config is not logged")
            else:
                self._open()
                old = config_of(self.record) if isinstance(self.record, dict) else None
                self.record = rec
                cfg = config_of(rec)
                if cfg != old:
                    inv = rec.get("invocations") if isinstance(rec.get("invocations"), list) else []
                    start = parse_utc(inv[0].get("started")) if inv and isinstance(inv[0], dict) else None
                    self._each(lambda h: h.config(cfg, start))
                did = True
        recs = self.tail.poll()
        if recs:
            self._open()
            self.changed_at = time.monotonic()
        first = last = None
        for step, obj, text in recs:
            digest = hashlib.sha1(text.encode()).digest()
            if step in self.logged:
                if self.logged[step] == digest:
                    continue  # the rewritten log keeps this line as it was
                note(f"{self.name}: the log was rewritten from step {step} (a --resume from an earlier checkpoint)")
                earlier = record_lines(self.tail.path, step)
                self._each(lambda h: h.branch(step, earlier))
                for s in [s for s in self.logged if s >= step]:
                    del self.logged[s]
            self._each(lambda h: h.scalars(step, scalars_of(obj), self._wall_time(step, obj)))
            self.logged[step] = digest
            first, last = first or step, step
        if last is not None:
            did = True
            now = time.monotonic()
            if "read" not in self.said or now - self.progress_at > 60:
                note(f"{self.name}: logged steps {first}-{last}")
                self.said.add("read")
                self.progress_at = now
        ev, raw, why = read_json_file(os.path.join(self.path, "eval.json"))
        if raw is not None and raw != self.eval_raw:
            self.eval_raw, self.changed_at = raw, time.monotonic()
            results = ev.get("results") if isinstance(ev, dict) else None
            if why:
                warn(f"{self.path}/eval.json: {why}: not logged")
            elif not isinstance(results, list):
                warn(f"{self.path}/eval.json is not eval_zeroshot's JSON (no \"results\" list): not logged")
            else:
                self._open()
                step = ev.get("step")
                if not is_number(step) or step != math.floor(step) or not 0 <= step <= 1e15:
                    if step is not None:
                        warn(f"{self.path}/eval.json: \"step\" {shown(step)} is not a step: logged at the last one")
                    step = max(self.logged) if self.logged else 0
                values = {}
                for t in results:
                    if isinstance(t, dict):
                        task = t.get("task") if isinstance(t.get("task"), str) else "?"
                        values.update({f"zeroshot/{task}/{k}": float(v) for k, v in t.items() if is_number(v)})
                self._each(lambda h: h.final_eval(int(step), values))
                note(f"{self.name}: zero-shot scores of step {int(step)}: {len(values)} values")
                did = True
        if did:
            self._each(lambda h: h.flush())
        status = self.status()
        if status != "running" and self.ended_said != self.record_raw:  # run.json's end follows the log's last line
            inv = self.record["invocations"][-1]
            logged = max(self.logged, default=0)
            note(f"{self.name}: {status} at step {inv.get('end_step', '?')} (logged to step {logged})")
            self.ended_said = self.record_raw
        return did

    def ended(self, quiet_s):
        """The run's invocation ended, its log is read to the last whole line, and nothing changed for quiet_s."""
        return self.status() not in ("", "running") and time.monotonic() - self.changed_at >= quiet_s

    def close(self):
        if self.handles:
            self._each(lambda h: h.close())
        if self.tail.partial:
            warn(f"{self.tail.path} ends in a part of a line (a crash cut it, or it was being written): not logged")


def is_run_dir(path):
    return any(os.path.lexists(os.path.join(path, n)) for n in ("log.jsonl", "run.json"))


def main(argv):
    ap = argparse.ArgumentParser(
        prog="tools/prism_live.py",
        description="Streams a Prism run's or a whole study's metrics into TensorBoard and/or Weights & Biases while "
        "it trains (docs/live.md).",
    )
    ap.add_argument("dir", metavar="RUN_OR_STUDY_DIR", help="a train_prism output directory, or a study's directory")
    ap.add_argument("--tensorboard", metavar="LOGDIR", help="write TensorBoard event files under LOGDIR/RUN_NAME")
    ap.add_argument("--wandb", action="store_true", help="log to Weights & Biases (one W&B run per run)")
    ap.add_argument("--wandb-project", metavar="P", help="the W&B project (default prism)")
    ap.add_argument("--wandb-entity", metavar="E", help="the W&B entity (default: yours)")
    ap.add_argument(
        "--wandb-mode", choices=("online", "offline"), help="online or offline (default: wandb's own, WANDB_MODE)"
    )
    ap.add_argument("--wandb-dir", metavar="DIR", help="where wandb keeps its run files (default: its own, ./wandb)")
    ap.add_argument("--once", action="store_true", help="log what is there now and exit (after-the-fact import)")
    ap.add_argument(
        "--interval", type=float, default=2.0, metavar="S", help="seconds between looks at the files (default 2)"
    )
    a = ap.parse_args(argv)
    if not a.tensorboard and not a.wandb:
        raise UserError("nothing to write to: pass --tensorboard LOGDIR and/or --wandb")
    for name in ("wandb_project", "wandb_mode", "wandb_dir", "wandb_entity"):
        if getattr(a, name) is not None and not a.wandb:
            raise UserError(f"--{name.replace('_', '-')} is a W&B setting: pass --wandb too")
    if not (0.05 <= a.interval <= 3600):
        raise UserError(f"--interval {a.interval} is out of range: pass 0.05 to 3600 seconds")
    root = os.path.normpath(a.dir)
    if a.once and not os.path.isdir(root):
        raise UserError(f"{a.dir} is not a directory; pass a train_prism output directory (-o OUT) or a study's")
    sinks = []
    outputs = [(f, d) for f, d in (("--tensorboard", a.tensorboard), ("--wandb-dir", a.wandb_dir)) if d]
    if a.tensorboard:
        sinks.append(TensorBoardSink(a.tensorboard))
    if a.wandb:
        sinks.append(WandbSink(a.wandb_project or "prism", a.wandb_mode, a.wandb_dir, a.wandb_entity))

    stop = []
    if not a.once:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda s, f: stop.append(s))
    runs = {}  # path -> Run
    single = None  # True: DIR is a run; False: a study; None: not known yet (nothing in it)
    waiting_said = False
    try:
        while True:
            if single is None and os.path.isdir(root):
                if is_run_dir(root):
                    single = True
                elif any(e.is_dir(follow_symlinks=False) and is_run_dir(e.path) for e in os.scandir(root)):
                    single = False
            if single:
                if root not in runs:
                    runs[root] = Run(root, os.path.basename(os.path.abspath(root)), None, sinks, outputs)
            elif single is False:
                study = os.path.basename(os.path.abspath(root))
                for e in sorted(os.scandir(root), key=lambda e: e.name):
                    if e.path not in runs and e.is_dir(follow_symlinks=False) and is_run_dir(e.path):
                        runs[e.path] = Run(e.path, e.name, study, sinks, outputs)
            elif a.once:
                raise UserError(
                    f"{a.dir} holds no run: no log.jsonl or run.json in it or in its subdirectories; pass a "
                    f"train_prism output directory (-o OUT) or a study's"
                )
            elif not waiting_said:
                note(f"waiting for a run in {a.dir} (a log.jsonl or run.json in it or in its subdirectories)")
                waiting_said = True
            for r in runs.values():
                try:
                    r.poll()
                except UserError as e:  # one run's file that cannot be read: that run is skipped, not the study
                    if single:
                        raise
                    if r.failed != str(e):
                        warn(f"{e}; the run {r.name} is skipped while it is so, the others go on")
                    r.failed = str(e)
                else:
                    r.failed = None
            if a.once or stop:
                break
            if single and runs[root].ended(max(5.0, 2 * a.interval)):
                note(f"{runs[root].name}: the run's invocation ended ({runs[root].status()}); stopped following")
                break
            time.sleep(a.interval)
    finally:
        for r in runs.values():
            r.close()
    if stop:
        note(f"stopped by {signal.Signals(stop[0]).name}; everything read so far is written")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UserError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        sys.exit(1)
    except OSError as e:  # a full disk or a vanished directory while writing: one line, not a traceback
        print(f"{PROG}: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:  # --once, or a second Ctrl-C
        print(f"{PROG}: interrupted", file=sys.stderr)
        sys.exit(130)
