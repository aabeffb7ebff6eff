// Node interop: the 12 conformance behaviours of docs/protocol.md, from a
// client generated at run time from proto/ by @grpc/proto-loader and
// served by @grpc/grpc-js (from the npm registry, locked in
// package-lock.json), against the real leased (LEASED_BIN): on a 500 ms
// TTL for the cases that wait out an expiry, on a 10 s one for those where
// a lease must stay live from one call to the next (a loaded machine must
// not expire it in between).
//
//   node conformance.js [--list | CASE...]
//
// Each case starts its own daemon; prints "ok NAME" or "FAIL NAME"; the
// exit status is the number of failures (capped at 1).
'use strict';

const assert = require('assert');
const { spawn } = require('child_process');
const crypto = require('crypto');
const fs = require('fs');
const os = require('os');
const path = require('path');

const ROOT = path.join(__dirname, '..', '..', '..');
const TTL_MS = 500;
const EXPIRE_MS = 1.2 * TTL_MS;
const LIVE_TTL_MS = 10000;
const WAITS_FOR_EXPIRY = new Set(['test_07_acquire_after_expiry_greater_token',
  'test_08_renew_after_expiry_and_takeover_failed_precondition',
  'test_11_tokens_rise_strictly_across_takeovers']);
const HELD = 9; // FAILED_PRECONDITION

// The packages npm installs (install.sh): a missing one fails every case
// with the reason, not a stack trace from require.
function packages() {
  try {
    return { grpc: require('@grpc/grpc-js'), loader: require('@grpc/proto-loader') };
  } catch (err) {
    throw new Error(`the Node client's packages are not installed in ${__dirname}/node_modules ` +
      `(${err.code}); tests/interop/node/install.sh installs them, and tests/run.sh ` +
      'runs it first and says why it failed');
  }
}

function load() {
  const { grpc, loader } = packages();
  const def = loader.loadSync('mecatl/driver/v1/session_lease.proto', {
    includeDirs: [path.join(ROOT, 'proto')],
    keepCase: true,
    longs: String,
    defaults: true,
  });
  const pkg = grpc.loadPackageDefinition(def);
  return { grpc, Service: pkg.mecatl.driver.v1.SessionLeaseService };
}

// One leased, on a free loopback port, in a directory of its own.
async function daemon(ttlMs) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'leased-node-'));
  const proc = spawn(process.env.LEASED_BIN, ['--listen', '127.0.0.1:0',
    '--data-dir', path.join(dir, 'data'), '--ttl', `${ttlMs}ms`],
  { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const addr = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listening line:\n${log}`)), 10000);
    proc.stderr.on('data', (chunk) => {
      log += chunk;
      const m = /msg=listening addr=(\S+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    proc.on('exit', (code) => reject(new Error(`leased exited ${code}:\n${log}`)));
  });
  const { grpc, Service } = load();
  const client = new Service(addr, grpc.credentials.createInsecure());
  const call = (method, req) => new Promise((resolve, reject) => {
    client[method](req, { deadline: Date.now() + 5000 }, (err, resp) => {
      if (err) reject(err); else resolve(resp);
    });
  });
  return {
    acquire: (session_id, owner) => call('Acquire', { session_id, owner }).then((r) => r.lease),
    renew: (lease) => call('Renew', { lease }).then((r) => r.lease),
    release: (lease) => call('Release', { lease }),
    async stop() {
      client.close();
      proc.kill('SIGTERM');
      const code = await new Promise((resolve) => proc.on('exit', resolve));
      fs.rmSync(dir, { recursive: true, force: true });
      assert.strictEqual(code, 0, `leased exited ${code}:\n${log}`);
    },
  };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const sessionId = () => crypto.randomUUID();
const ownerId = () => `${os.hostname()}-${process.pid}-${crypto.randomBytes(4).toString('hex')}`;
const token = (lease) => BigInt(lease.token);
const expiry = (lease) => BigInt(lease.expiry.seconds) * 1000000000n + BigInt(lease.expiry.nanos);

async function expectHeld(promise) {
  try {
    await promise;
  } catch (err) {
    assert.strictEqual(err.code, HELD, `want FAILED_PRECONDITION, got ${err.code} (${err.details})`);
    return;
  }
  assert.fail('succeeded, want FAILED_PRECONDITION');
}

const cases = {
  async test_01_fresh_acquire_returns_id_owner_expiry(c) {
    const sid = sessionId(); const owner = ownerId();
    const lease = await c.acquire(sid, owner);
    assert.strictEqual(lease.session_id, sid);
    assert.strictEqual(lease.owner, owner);
    assert.ok(lease.expiry && expiry(lease) > 0n);
    assert.ok(token(lease) >= 1n);
  },
  async test_02_renew_keeps_token_expiry_strictly_later(c) {
    const lease = await c.acquire(sessionId(), ownerId());
    const renewed = await c.renew(lease);
    assert.strictEqual(token(renewed), token(lease));
    assert.ok(expiry(renewed) > expiry(lease));
    const again = await c.renew(renewed);
    assert.ok(expiry(again) > expiry(renewed));
    await sleep(500);
    const later = await c.renew(again);
    assert.strictEqual(token(later), token(lease));
    assert.ok(expiry(later) > expiry(again));
  },
  async test_03_after_release_another_owner_acquires(c) {
    const sid = sessionId();
    await c.release(await c.acquire(sid, ownerId()));
    const other = ownerId();
    const got = await c.acquire(sid, other);
    assert.strictEqual(got.owner, other);
  },
  async test_04_second_owner_of_live_lease_failed_precondition(c) {
    const sid = sessionId();
    const lease = await c.acquire(sid, ownerId());
    await expectHeld(c.acquire(sid, ownerId()));
    assert.strictEqual(token(await c.renew(lease)), token(lease));
  },
  async test_05_same_owner_reacquire_keeps_token(c) {
    const sid = sessionId(); const owner = ownerId();
    const lease = await c.acquire(sid, owner);
    const again = await c.acquire(sid, owner);
    assert.strictEqual(token(again), token(lease));
  },
  async test_06_acquire_after_release_greater_token(c) {
    const sid = sessionId(); const owner = ownerId();
    const lease = await c.acquire(sid, owner);
    await c.release(lease);
    const other = await c.acquire(sid, ownerId());
    assert.ok(token(other) > token(lease));
    await c.release(other);
    const mine = await c.acquire(sid, owner);
    assert.ok(token(mine) > token(other));
  },
  async test_07_acquire_after_expiry_greater_token(c) {
    const sid = sessionId(); const owner = ownerId();
    const lease = await c.acquire(sid, owner);
    await sleep(EXPIRE_MS);
    assert.ok(token(await c.acquire(sid, ownerId())) > token(lease));
    const sid2 = sessionId();
    const first = await c.acquire(sid2, owner);
    await sleep(EXPIRE_MS);
    assert.ok(token(await c.acquire(sid2, owner)) > token(first));
  },
  async test_08_renew_after_expiry_and_takeover_failed_precondition(c) {
    const sid = sessionId();
    const lease = await c.acquire(sid, ownerId());
    await sleep(EXPIRE_MS);
    await c.acquire(sid, ownerId());
    await expectHeld(c.renew(lease));
  },
  async test_09_renew_after_release_failed_precondition(c) {
    const lease = await c.acquire(sessionId(), ownerId());
    await c.release(lease);
    await expectHeld(c.renew(lease));
  },
  async test_10_release_idempotent_also_never_seen(c) {
    const lease = await c.acquire(sessionId(), ownerId());
    await c.release(lease);
    await c.release(lease);
    const never = { session_id: sessionId(), owner: ownerId(), token: '7' };
    await c.release(never);
    await c.release(never);
    assert.ok(token(await c.acquire(never.session_id, ownerId())) >= 1n);
  },
  async test_11_tokens_rise_strictly_across_takeovers(c) {
    const sid = sessionId();
    let lease = await c.acquire(sid, ownerId());
    const tokens = [token(lease)];
    for (let i = 0; i < 6; i++) {
      if (i % 3 === 2) await sleep(EXPIRE_MS);
      else await c.release(lease);
      lease = await c.acquire(sid, ownerId());
      tokens.push(token(lease));
    }
    for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i - 1] < tokens[i], `${tokens}`);
  },
  async test_12_distinct_sessions_never_contend(c) {
    const a = ownerId(); const b = ownerId();
    const la = await c.acquire(sessionId(), a);
    const lb = await c.acquire(sessionId(), b);
    assert.strictEqual(token(await c.renew(la)), token(la));
    await c.release(la);
    assert.strictEqual(token(await c.renew(lb)), token(lb));
    const many = await Promise.all(Array.from({ length: 16 },
      () => c.acquire(sessionId(), ownerId())));
    for (const l of many) assert.ok(token(l) >= 1n);
  },
};

async function main() {
  const args = process.argv.slice(2);
  if (args[0] === '--list') {
    console.log(Object.keys(cases).join('\n'));
    return 0;
  }
  let failed = 0;
  try {
    packages();
  } catch (err) {
    console.log(`FAIL ${args.join(' ') || 'all cases'}: ${err.message}`);
    return 1;
  }
  for (const name of args.length ? args : Object.keys(cases)) {
    if (!cases[name]) {
      console.log(`no such case: ${name}`);
      failed++;
      continue;
    }
    const started = Date.now();
    let c;
    try {
      c = await daemon(WAITS_FOR_EXPIRY.has(name) ? TTL_MS : LIVE_TTL_MS);
      await cases[name](c);
      await c.stop();
      c = null;
      console.log(`ok   ${name} (${((Date.now() - started) / 1000).toFixed(2)}s)`);
    } catch (err) {
      failed++;
      console.log(`FAIL ${name}\n${err.stack || err}`);
      if (c) await c.stop().catch(() => {});
    }
  }
  return failed ? 1 : 0;
}

main().then((code) => process.exit(code));
