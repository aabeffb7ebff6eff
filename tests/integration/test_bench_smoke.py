"""Benchmark smoke runs: leasebench works end to end against the real
daemon and against its null server, with zero errors; handoffbench and
waiters_mem.py and watchers_mem.py run to their end. Asserts no speed: numbers belong in
docs/benchmarks.md, from tests/bench/compare.sh and the others."""
import json
import os
import re
import subprocess
import sys

import harness

KEYS = ("ops_per_sec", "p50_us", "p99_us", "p999_us", "errors")


def bench(url, workload, seconds="2s"):
    out = subprocess.run(
        [os.environ["LEASEBENCH_BIN"], "--target", url, "--workload",
         workload, "--duration", seconds, "--warmup", "0s",
         "--sessions", "256", "--concurrency", "16", "--json"],
        capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
    result = json.loads(out.stdout)
    for k in KEYS:
        assert k in result, (k, result)
    assert result["errors"] == 0, result
    assert result["ops"] > 0, result
    return result


def test_leased_renew_two_seconds():
    with harness.Leased(ttl="30s") as d:
        r = bench("leased://" + d.addr, "renew")
        assert r["renew"] > r["acquire"] > 0, r
        assert r["release"] > 0, r


def test_leased_contend():
    with harness.Leased(ttl="30s") as d:
        r = bench("leased://" + d.addr, "contend", "1s")
        assert r["held"] > 0 and r["acquire"] > r["held"], r


def test_null_server_churn():
    p = subprocess.Popen([os.environ["LEASEBENCH_NULL_BIN"], "--listen",
                          "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
    try:
        addr = re.search(r"listening addr=(\S+)", p.stdout.readline()).group(1)
        r = bench("null://" + addr, "churn", "1s")
        assert r["acquire"] > 0 and r["release"] > 0, r
    finally:
        p.terminate()
        assert p.wait(timeout=10) == 0


def test_handoffbench_hands_every_lease_over():
    p = subprocess.run([os.environ["HANDOFFBENCH_BIN"], "10"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, (p.stdout, p.stderr)
    rows = re.findall(r"^(\S.*?|  \S.*?)\s+n=(\d+)", p.stdout, re.M)
    assert [r[0].strip() for r in rows] == [
        "release -> Wait", "grant - release's answer", "release -> polling",
        "release, nobody waiting", "expiry -> Wait", "fdatasync (4 KiB)",
        "after 20 ms idle"], p.stdout


def test_waiters_mem_runs():
    script = os.path.join(harness.ROOT, "tests", "bench", "waiters_mem.py")
    p = subprocess.run([sys.executable, script, "200", "20"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "200 waiting calls on 20 sessions" in p.stdout, p.stdout


def test_watchers_mem_runs():
    script = os.path.join(harness.ROOT, "tests", "bench", "watchers_mem.py")
    p = subprocess.run([sys.executable, script, "200"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "200 watch streams" in p.stdout, p.stdout
    assert "each watcher told" in p.stdout, p.stdout


harness.main(globals())
