#!/usr/bin/env node
// An independent verifier of countersign receipts and audit exports, with no
// dependency beyond Node.js 18+ (Ed25519 and SHA-256 from node:crypto).
//
//   node verify-receipt.mjs --export audit.jsonl [--receipt receipt.jws|-]
//
// The export is what `countersign audit export` writes (JSON Lines). Without
// --receipt every receipt in the export is checked. It verifies:
//   - each audit entry's hash is SHA-256 of its body bytes, entries are
//     consecutive and each body's "prev" is the previous entry's hash;
//   - each checkpoint is an EdDSA JWS (typ countersign-audit-checkpoint+jwt)
//     under the export's JWKS, stating the hash the chain has at its seq;
//   - each receipt is an EdDSA JWS (typ countersign-receipt+jwt) under the
//     JWKS, with requested = approved = executed digest, every approver saw
//     it, and the chain records the proposal's creation, its token and this
//     execution's outcome under a valid checkpoint;
//   - the receipt's arguments, when it carries them, hash to its digest
//     (SHA-256 of their RFC 8785 canonical JSON);
//   - a write confirmed by a standing mandate names no approver, its token's
//     entry names the mandate, and the chain records the mandate's grant with
//     the receipt's terms digest, grantors and decisions; the receipt's terms
//     hash to that digest and the write fits them (tool, agent, tier, target,
//     and with the arguments: enums, patterns, currency and per-call cap);
//     counting the chain's tokens under the mandate up to this one, it is
//     within the use count and budget, issued before the terms' expiry and
//     not after a revocation;
//   - an approver shown an effect preview was shown the receipt's
//     effect_digest;
//   - every signing key the chain records (signing_key.added) is in the JWKS
//     with the recorded public key, none was recorded late after the chain
//     recorded keys as they were added, no checkpoint is signed by a key
//     recorded after its head, and, when the export starts at entry 1, the
//     receipt's key is one the chain records.
//   - each security-key approval (and mandate grant): the evidence hashes to
//     the receipt's evidence_digest, its WebAuthn assertion (ES256, EdDSA or
//     RS256) verifies over the transaction challenge derived from the
//     proposal id, the digest and the nonce, for its relying party and
//     origin, with the user present and verified, by the public key of a
//     credential registered to the approver (and so recorded in the chain,
//     when the export reaches back to the registration); a tier that needs a
//     security key accepts no click.
// Exit status 0 when everything holds, 1 naming the first broken element
// (or a file that cannot be read), 2 for a mistake in the arguments.

import { createHash, createPublicKey, verify } from "node:crypto";
import { readFileSync } from "node:fs";

const RECEIPT_TYP = "countersign-receipt+jwt";
const CHECKPOINT_TYP = "countersign-audit-checkpoint+jwt";
const EXPORT_FORMAT = "countersign.audit.export.v1";

function fail(element, detail) {
  console.log(`FAIL ${element}: ${detail}`);
  process.exit(1);
}

// usage reports a mistake on the command line with exit status 2, as
// countersign verify does.
function usage(msg) {
  console.error(`error: ${msg}`);
  console.error("usage: node verify-receipt.mjs --export FILE [--receipt FILE|-]");
  process.exit(2);
}

function args(argv) {
  const out = {};
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i].replace(/^--?/, "");
    if (!argv[i].startsWith("-") || !["export", "receipt"].includes(name)) usage(`unknown argument ${argv[i]}`);
    if (argv[i + 1] === undefined) usage(`${argv[i]} needs a value`);
    out[name] = argv[i + 1];
  }
  if (!out.export) usage("--export is required");
  return out;
}

// read returns the text of the file given to --flag ("-" is stdin), or
// says it cannot be read and exits 1, as countersign verify does.
function read(flag, path) {
  try {
    return readFileSync(path === "-" ? 0 : path, "utf8");
  } catch (err) {
    console.error(`error: cannot read --${flag} ${path}: ${err.code === "ENOENT" ? "no such file" : err.message}`);
    process.exit(1);
  }
}

const sha256 = (text) => "sha256:" + createHash("sha256").update(text, "utf8").digest("hex");

// canonical is RFC 8785 (JCS): members sorted by their names' UTF-16 code
// units, no whitespace, and strings and numbers as ECMAScript writes them,
// which is what JSON.stringify does.
function canonical(v) {
  if (Array.isArray(v)) return "[" + v.map(canonical).join(",") + "]";
  if (v !== null && typeof v === "object") {
    return "{" + Object.keys(v).sort().map((k) => JSON.stringify(k) + ":" + canonical(v[k])).join(",") + "}";
  }
  return JSON.stringify(v);
}
const digest = (v) => sha256(canonical(v));
const b64url = (s) => Buffer.from(s, "base64url");

// verifyJWS checks a compact JWS of type typ against the JWKS and returns
// its payload object; the key id is in kidOf(compact).
function verifyJWS(compact, typ, keys, element) {
  const parts = compact.trim().split(".");
  if (parts.length !== 3) fail(element, "not a compact JWS");
  let header;
  try {
    header = JSON.parse(b64url(parts[0]).toString("utf8"));
  } catch {
    fail(element, "the header is not JSON");
  }
  if (header.alg !== "EdDSA" || header.typ !== typ) fail(element, `header ${JSON.stringify(header)} is not EdDSA/${typ}`);
  const key = keys.get(header.kid);
  if (!key) fail(element, `signed by key ${header.kid}, which the JWKS does not hold`);
  const ok = verify(null, Buffer.from(parts[0] + "." + parts[1], "ascii"), key, b64url(parts[2]));
  if (!ok) fail(element, "the signature does not verify");
  try {
    return JSON.parse(b64url(parts[1]).toString("utf8"));
  } catch {
    fail(element, "the payload is not JSON");
  }
}

function kidOf(compact) {
  return JSON.parse(b64url(compact.trim().split(".")[0]).toString("utf8")).kid;
}

// cbor reads the CBOR a COSE key is made of: integers, byte and text
// strings, arrays and maps (RFC 8949, definite lengths only).
function cbor(buf) {
  let i = 0;
  const item = () => {
    const b = buf[i++];
    const major = b >> 5;
    let n = b & 31;
    if (n === 24) n = buf[i++];
    else if (n === 25) { n = buf.readUInt16BE(i); i += 2; }
    else if (n === 26) { n = buf.readUInt32BE(i); i += 4; }
    else if (n > 23) throw new Error("unsupported CBOR length");
    switch (major) {
      case 0: return n;
      case 1: return -1 - n;
      case 2: i += n; return buf.subarray(i - n, i);
      case 3: i += n; return buf.subarray(i - n, i).toString("utf8");
      case 4: return Array.from({ length: n }, item);
      case 5: {
        const m = new Map();
        for (let k = 0; k < n; k++) { const key = item(); m.set(key, item()); }
        return m;
      }
      default: throw new Error("unsupported CBOR item");
    }
  };
  return item();
}

// coseKey turns a registered COSE_Key into a Node.js key and the hash its
// algorithm signs with (ES256, EdDSA, RS256).
function coseKey(bytes) {
  const m = cbor(bytes);
  const x = (label) => m.get(label).toString("base64url");
  const kty = m.get(1);
  const alg = m.get(3);
  if (kty === 2 && m.get(-1) === 1 && (alg === undefined || alg === -7)) {
    return { hash: "sha256", key: createPublicKey({ key: { kty: "EC", crv: "P-256", x: x(-2), y: x(-3) }, format: "jwk" }) };
  }
  if (kty === 1 && m.get(-1) === 6 && (alg === undefined || alg === -8)) {
    return { hash: null, key: createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: x(-2) }, format: "jwk" }) };
  }
  if (kty === 3 && (alg === undefined || alg === -257)) {
    return { hash: "sha256", key: createPublicKey({ key: { kty: "RSA", n: x(-1), e: x(-2) }, format: "jwk" }) };
  }
  throw new Error(`COSE key type ${kty} with algorithm ${alg} is not supported here`);
}

// checkAssertion verifies a security-key approval's evidence of
// approving proposalID with argsDigest: the challenge derived from them and
// the server's nonce, the relying party and origin, user presence and
// verification, the counter and the signature (models/stepup.VerifyEvidence).
function checkAssertion(ev, proposalID, argsDigest, element) {
  if (ev.proposal_id !== proposalID || ev.args_digest !== argsDigest) fail(element, "the evidence is of another proposal or digest");
  const nonce = b64url(ev.nonce);
  if (nonce.length < 16) fail(element, "the evidence's nonce is too short");
  const h = createHash("sha256");
  for (const part of [Buffer.from(proposalID, "utf8"), Buffer.from(argsDigest, "utf8"), nonce]) {
    const n = Buffer.alloc(4);
    n.writeUInt32BE(part.length);
    h.update(n).update(part);
  }
  const want = h.digest().toString("base64url");
  if (ev.challenge !== want) fail(element, "the security key signed a challenge not derived from the proposal, its digest and the nonce");
  const clientData = b64url(ev.client_data_json);
  let cd;
  try {
    cd = JSON.parse(clientData.toString("utf8"));
  } catch {
    fail(element, "the signed client data is not JSON");
  }
  if (cd.type !== "webauthn.get" || cd.challenge !== want) fail(element, "the signed client data is not an assertion of this challenge");
  if (cd.origin !== ev.origin) fail(element, "the signed client data names another origin");
  const host = new URL(ev.origin).hostname.toLowerCase();
  const rp = String(ev.rp_id).toLowerCase();
  if (!rp || (host !== rp && !host.endsWith("." + rp))) fail(element, `the origin ${ev.origin} is not within the relying party ${ev.rp_id}`);
  const ad = b64url(ev.authenticator_data);
  if (ad.length < 37 || !ad.subarray(0, 32).equals(createHash("sha256").update(ev.rp_id, "utf8").digest())) {
    fail(element, "the authenticator data is for another relying party");
  }
  if ((ad[32] & 0x01) === 0 || (ad[32] & 0x04) === 0 || !ev.user_verified) fail(element, "the user was not present and verified");
  if (ad.readUInt32BE(33) !== ev.sign_count) fail(element, "the signed counter is not the evidence's");
  let pub;
  try {
    pub = coseKey(b64url(ev.public_key));
  } catch (err) {
    fail(element, err.message);
  }
  const signed = Buffer.concat([ad, createHash("sha256").update(clientData).digest()]);
  if (!verify(pub.hash, signed, pub.key, b64url(ev.signature))) fail(element, "the WebAuthn assertion's signature does not verify");
}

// checkApprovers checks each approval under a tier of the given
// confirmation: a click where the tier allows one, else a security-key
// assertion by a key registered to the approver.
// A tier's approver groups, from the chain: the requirement the proposal
// was created with against who counted toward each group when the token was
// issued (or the mandate granted: its grantors are then the approvers).
// Each factor keeps its group and count, has that many approvers,
// all approvers of the receipt and none counted twice; the receipt has as
// many approvers as the quorum and the groups need together. When the
// export holds the chain from entry 1, each counted approver must be a
// member of the group by the chain's membership entries before the token
// was issued.
function checkGroups(ids, quorum, require, factors, issuedSeq, what, element) {
  if (!Array.isArray(factors) || factors.length !== require.length) {
    fail(element, `${what} without the approver groups the proposal's tier required`);
  }
  const whole = bySeq.has(1);
  const member = new Map();
  if (whole) {
    for (let seq = 1; seq < issuedSeq; seq++) {
      const e = bySeq.get(seq);
      if (!e || e.body.kind !== "admin.group_changed") continue;
      const { group, user_id: user, change } = e.body.data;
      if (!member.has(group)) member.set(group, new Set());
      if (change === "member_added") member.get(group).add(user);
      if (change === "member_removed") member.get(group).delete(user);
    }
  }
  const approvers = new Set(ids);
  const seen = new Set();
  let need = Math.max(quorum, 1);
  let sum = 0;
  factors.forEach((f, i) => {
    const want = require[i];
    if (f.group !== want.group || f.count !== want.count) {
      fail(element, `${what} under group ${f.group} ×${f.count}, the proposal was created requiring group ${want.group} ×${want.count}`);
    }
    if (!Array.isArray(f.approvers) || f.approvers.length < f.count) {
      fail(element, `${what} with fewer approvers than group ${f.group} requires`);
    }
    for (const u of f.approvers) {
      if (!approvers.has(u) || seen.has(u)) fail(element, `${u} counts toward group ${f.group} but is not a distinct approver of the receipt`);
      if (whole && !(member.get(f.group) || new Set()).has(u)) {
        fail(element, `${u} counts toward group ${f.group}, which the chain shows them outside of when ${what}`);
      }
      seen.add(u);
    }
    sum += want.count;
  });
  need = Math.max(need, sum);
  if (ids.length < need) fail(element, `${ids.length} approvers, the quorum and the groups need ${need}`);
}

// checkApprovals checks the approvals a receipt names (its approvers, or a
// mandate's grantors) against the chain's decision.approved entries of
// that proposal, by decision id: the same user, digest shown, method,
// evidence and effect preview shown, and no approval the receipt leaves
// out (models/audit story and grantStory).
function checkApprovals(named, recorded, element, what) {
  for (const a of named) {
    const e = recorded.get(a.decision_id);
    if (!e) fail(element, `the ${what} ${a.decision_id} by ${a.user_id} is not in the chain`);
    const c = e.body.data;
    if (c.user_id !== a.user_id || c.digest_seen !== a.digest_seen || c.method !== a.method ||
      (c.evidence_digest || "") !== (a.evidence_digest || "") || (what === "approval" && (c.effect_seen || "") !== (a.effect_seen || ""))) {
      fail(`audit entry ${e.seq} (line ${e.line})`, `the recorded ${what} (user, digest shown, method, evidence) differs from the receipt's`);
    }
  }
  if (what === "approval" && recorded.size !== named.length) fail(element, `the chain records ${recorded.size} approvals, the receipt ${named.length}`);
}

function checkApprovers(approvers, proposalID, argsDigest, confirmation) {
  for (const a of approvers) {
    if (a.method !== "security_key") {
      if (confirmation === "webauthn") fail(`approval by ${a.user_id}`, `the tier needs a security key; this approval was a ${a.method} click`);
      continue;
    }
    const element = `evidence of decision ${a.decision_id}`;
    const raw = evidence.get(a.decision_id);
    if (raw === undefined) fail(element, "the export holds no evidence for this security-key approval");
    if (sha256(raw) !== a.evidence_digest) fail(element, "it does not hash to the receipt's evidence_digest: the evidence was altered");
    const ev = JSON.parse(raw);
    checkAssertion(ev, proposalID, argsDigest, element);
    const cred = credentials.get(ev.credential_id);
    if (!cred) fail(element, `credential ${ev.credential_id} is not among the export's registered credentials`);
    if (cred.user_id !== a.user_id) fail(element, `credential ${ev.credential_id} is registered to ${cred.user_id}, not to the approver`);
    if (cred.public_key !== ev.public_key) fail(element, `the assertion's public key is not the registered key of credential ${ev.credential_id}`);
    for (const e of bySeq.values()) {
      if (e.body.kind === "security_key.registered" && e.body.data.credential_id === ev.credential_id &&
        (e.body.data.user_id !== a.user_id || e.body.data.public_key !== ev.public_key)) {
        fail(element, `the chain registered credential ${ev.credential_id} to ${e.body.data.user_id} with another public key`);
      }
    }
  }
}

// checkTerms checks that a mandate receipt carries the terms its grantors
// approved and that the write fits them, as the server decides it
// (MandateTerms.Admit in models/mandate.go). Patterns are RE2 on the
// server; the ones a mandate takes (ids, codes) read the same here.
function checkTerms(rc, element) {
  const m = rc.mandate;
  const t = m.terms;
  if (t === undefined || t === null) fail(element, `it names mandate ${m.id} without its terms: whether the write fits them cannot be checked`);
  if (digest(t) !== m.terms_digest) fail(element, `the terms of mandate ${m.id} do not hash to its terms digest`);
  const where = `the write does not fit the terms of mandate ${m.id}`;
  if (t.tool !== rc.tool) fail(element, `${where}: they cover tool ${t.tool}`);
  if (!(t.agents || []).includes(rc.agent)) fail(element, `${where}: they do not cover agent ${rc.agent}`);
  const tiers = t.tiers || [];
  if (tiers[0] !== m.risk_tier) fail(element, `mandate ${m.id} was granted under the ${m.risk_tier} tier, its terms' strictest is ${tiers[0]}`);
  if (t.policy_version !== rc.policy_version) fail(element, `${where}: the tool's rules changed since the mandate was granted`);
  if (!tiers.includes(rc.risk_tier)) fail(element, `${where}: risk tier above the mandate`);
  const whole = (pattern) => {
    try {
      return new RegExp(`^(?:${pattern})$`, "u");
    } catch {
      fail(element, `the pattern ${JSON.stringify(pattern)} of mandate ${m.id} does not compile here`);
    }
  };
  const unchecked = [];
  // A batch's targets, listed by the receipt and held to its resource set
  // digest above; a receipt signed before receipts listed them binds them
  // by digest only.
  const targets = !rc.resource_set_digest ? [rc.resource] : rc.resource_set;
  if (targets) {
    for (const id of targets) {
      if (t.resource_pattern && !whole(t.resource_pattern).test(id)) fail(element, `${where}: resource not covered by the mandate`);
      if (t.resources && t.resources.length > 0 && !t.resources.includes(id)) fail(element, `${where}: resource not covered by the mandate`);
    }
  } else if (t.resource_pattern || (t.resources && t.resources.length > 0)) {
    unchecked.push("the batch's targets (a receipt signed before receipts listed them binds them by digest only)");
  }
  const a = rc.arguments;
  if (a === undefined) {
    if (t.money || Object.keys(t.enums || {}).length > 0 || Object.keys(t.patterns || {}).length > 0) {
      unchecked.push("the terms on arguments (the receipt leaves the arguments out)");
    }
    return unchecked;
  }
  const str = (f) => (typeof a[f] === "string" ? a[f] : undefined);
  for (const f of Object.keys(t.enums || {}).sort()) {
    if (str(f) === undefined || !t.enums[f].includes(str(f))) fail(element, `${where}: ${f} not among the mandate's values`);
  }
  for (const f of Object.keys(t.patterns || {}).sort()) {
    if (str(f) === undefined || !whole(t.patterns[f]).test(str(f))) fail(element, `${where}: ${f} does not match the mandate's pattern`);
  }
  const mo = t.money;
  if (mo) {
    if (str(mo.currency_field) !== mo.currency) fail(element, `${where}: currency not covered by the mandate`);
    const v = a[mo.field];
    if (!Number.isInteger(v) || v < 0) fail(element, `${where}: ${mo.field} is not an amount`);
    if (mo.per_call_cap > 0 && v > mo.per_call_cap) fail(element, `${where}: over per-call cap`);
  }
  return unchecked;
}

// checkUse counts the chain's tokens issued under the receipt's mandate up
// to this write's, and checks this one was within the use count and the
// budget, before the terms' expiry and not after a revocation. It returns
// how the use reads.
function checkUse(rc, element) {
  const m = rc.mandate;
  const t = m.terms;
  let uses = 0;
  let spent = 0;
  let revoked = 0;
  for (const [seq, e] of [...bySeq].sort((x, y) => x[0] - y[0])) {
    if (e.body.data.mandate_id !== m.id) continue;
    if (e.body.kind === "mandate.revoked" && !revoked) revoked = seq;
    if (e.body.kind !== "token.issued") continue;
    uses++;
    spent += e.body.data.amount || 0;
    if (e.body.data.jti !== rc.jti || e.body.proposal_id !== rc.proposal_id) continue;
    if (revoked) fail(element, `its token was issued at entry ${seq}, after the mandate was revoked at entry ${revoked}`);
    if (!(e.body.at < Date.parse(t.expires_at))) fail(element, `its token was issued after the terms of mandate ${m.id} expired`);
    if (t.max_uses > 0 && uses > t.max_uses) fail(element, `this was use ${uses} of a mandate for ${t.max_uses}`);
    const budget = t.money && t.money.budget > 0 ? t.money.budget : 0;
    if (budget && spent > budget) fail(element, `with this write mandate ${m.id} spent ${spent} ${t.money.currency} of a budget of ${budget}`);
    return `use ${uses}${t.max_uses > 0 ? ` of ${t.max_uses}` : ""}${budget ? `, ${spent} of a budget of ${budget} ${t.money.currency} spent with it` : ""}`;
  }
  fail(element, `the chain holds no token.issued entry for its token under mandate ${m.id}`);
}

const opts = args(process.argv.slice(2));
const lines = read("export", opts.export).split("\n");
const given = opts.receipt === undefined ? undefined : read("receipt", opts.receipt);

let header = null;
let tenant = "";
const keys = new Map();
const publicX = new Map(); // kid → the JWKS's "x", as the chain records keys
const entries = [];
const checkpoints = [];
const receipts = [];
const evidence = new Map(); // decision id → the evidence's exact stored text
const credentials = new Map(); // credential id → {user_id, public_key}
lines.forEach((text, i) => {
  if (text.trim() === "") return;
  let l;
  try {
    l = JSON.parse(text);
  } catch {
    fail(`export line ${i + 1}`, "not JSON");
  }
  switch (l.type) {
    case "header":
      if (l.format !== EXPORT_FORMAT) fail(`export line ${i + 1}`, `format ${JSON.stringify(l.format)} is not ${JSON.stringify(EXPORT_FORMAT)}`);
      header = l;
      tenant = l.tenant;
      break;
    case "jwks":
      for (const k of l.jwks.keys) {
        if (k.kty === "OKP" && k.crv === "Ed25519") {
          keys.set(k.kid, createPublicKey({ key: k, format: "jwk" }));
          publicX.set(k.kid, k.x);
        }
      }
      break;
    case "entry":
      entries.push({ ...l, line: i + 1 });
      break;
    case "checkpoint":
      checkpoints.push({ ...l, line: i + 1 });
      break;
    case "receipt":
      receipts.push(l.jws);
      break;
    case "evidence":
      evidence.set(l.decision_id, l.evidence);
      break;
    case "credential":
      credentials.set(l.credential_id, l);
      break;
  }
});
// Without the header nothing says whose chain this is: entries,
// checkpoints and receipts of any organization would pass.
if (!header || !tenant) {
  fail("export", "the header line is missing (or names no organization): it is not a whole export, and whose chain it holds cannot be checked");
}
if (keys.size === 0) fail("jwks", "the export holds no Ed25519 key");
if (entries.length === 0) fail("audit chain", "the export holds no audit entries: nothing can be checked against the chain");

// The chain.
const bySeq = new Map();
let prev = null;
for (const e of entries) {
  const element = `audit entry ${e.seq} (line ${e.line})`;
  if (sha256(e.body) !== e.hash) fail(element, "its body does not hash to the recorded hash: the entry was altered");
  const body = JSON.parse(e.body);
  if (body.seq !== e.seq || body.tenant !== tenant) fail(element, "its body names another position or tenant");
  if (prev) {
    if (e.seq !== prev.seq + 1) fail(element, `it follows entry ${prev.seq}: entries are missing or out of order`);
    if (body.prev !== prev.hash) fail(element, `it does not link to entry ${prev.seq}`);
  }
  bySeq.set(e.seq, { ...e, body });
  prev = e;
}

// The signing keys the chain records.
const recorded = new Map(); // kid → {seq, backfilled}
let recording = false; // the chain recorded a key as it was added
for (const e of entries) {
  const b = bySeq.get(e.seq).body;
  if (b.kind !== "signing_key.added") continue;
  const element = `audit entry ${e.seq} (line ${e.line})`;
  const kid = b.data.kid;
  const backfilled = b.data.backfilled === true;
  if (recorded.has(kid)) fail(element, `it records signing key ${kid} a second time`);
  recorded.set(kid, { seq: e.seq, backfilled });
  if (backfilled && recording) {
    fail(element, `it records signing key ${kid} late, although the chain already recorded keys as they were added: the key was not added through countersign`);
  }
  recording ||= !backfilled;
  if (!publicX.has(kid)) fail(element, `it records signing key ${kid}, which the JWKS does not hold`);
  if (publicX.get(kid) !== b.data.public_key) fail(element, `it records signing key ${kid} with another public key than the JWKS holds under that kid`);
}

// The checkpoints.
let anchored = 0;
for (const c of checkpoints) {
  const element = `checkpoint ${c.seq} (line ${c.line})`;
  const claims = verifyJWS(c.jws, CHECKPOINT_TYP, keys, element);
  if (claims.seq !== c.seq || claims.head !== c.hash || claims.count !== claims.seq || claims.tenant !== tenant) {
    fail(element, "the signed claims do not match the line");
  }
  const e = bySeq.get(c.seq);
  if (!e) fail(element, `entry ${c.seq}, which it covers, is not in the export`);
  if (e.hash !== claims.head) fail(element, `the chain's entry ${c.seq} is not the signed head`);
  const r = recorded.get(kidOf(c.jws));
  if (r && !r.backfilled && r.seq > c.seq) fail(element, `it is signed by ${kidOf(c.jws)}, which the chain records as added only at entry ${r.seq}`);
  anchored = Math.max(anchored, c.seq);
}
const under = anchored ? `the last signed checkpoint is at entry ${anchored}` : "no checkpoint signs any of them";
console.log(`ok   audit chain: ${entries.length} entries (${entries[0].seq} to ${entries[entries.length - 1].seq}) intact and linked; ${under}`);

// The receipts.
const wanted = opts.receipt ? [given] : receipts;
// The export as a whole, when all its receipts are checked: it ends at a
// signed checkpoint and holds each receipt the chain records (an outcome's
// receipt_digest), so none can be left out or replaced by a copy of
// another (one held twice is counted in the loop below).
function checkWhole() {
  const held = new Set(receipts.map((r) => sha256(r.trim())));
  let recorded = 0;
  for (const e of entries) {
    const b = bySeq.get(e.seq).body;
    if (b.kind === "execution.outcome" && b.data.receipt_digest) recorded++;
    if (b.kind === "execution.outcome" && b.data.receipt_digest && !held.has(b.data.receipt_digest)) {
      fail(`audit entry ${e.seq} (line ${e.line})`, `the outcome of execution ${b.data.execution_id} records receipt ${b.data.receipt_digest}, which the export does not hold`);
    }
  }
  return recorded;
}
if (!opts.receipt) {
  const last = entries[entries.length - 1];
  if (anchored < last.seq) fail("checkpoints", `no valid signed checkpoint covers entry ${last.seq} (line ${last.line}), the export's last: an export ends at one`);
  if (wanted.length === 0) {
    checkWhole();
    console.log("ok   receipts: the chain records none and the export holds none: the chain and its checkpoints alone were checked");
    console.log("VERIFIED (the chain alone: no receipts were checked)");
    process.exit(0);
  }
}
const receiptOf = new Set(); // the executions whose receipt was checked
for (let text of wanted) {
  text = text.trim();
  let asked = ""; // the execution the API's answer is of
  if (text.startsWith("{")) {
    let answer;
    try {
      answer = JSON.parse(text);
    } catch {
      fail("receipt", "the answer is not JSON");
    }
    if (typeof answer.receipt !== "string") fail("receipt", "the answer holds no receipt");
    text = answer.receipt.trim();
    asked = answer.execution_id || "";
  }
  const rc = verifyJWS(text, RECEIPT_TYP, keys, "receipt");
  if (asked && rc.execution_id !== asked) fail("receipt", `the answer is of execution ${asked}, but its receipt is of execution ${rc.execution_id}`);
  const element = `receipt of execution ${rc.execution_id}`;
  if (receiptOf.has(rc.execution_id)) fail("receipts", `the export holds more than one receipt of execution ${rc.execution_id}`);
  receiptOf.add(rc.execution_id);
  if (recorded.size > 0 && entries.length > 0 && entries[0].seq === 1 && !recorded.has(kidOf(text))) {
    fail(element, `it is signed by ${kidOf(text)}, a key the organization's chain never recorded`);
  }
  const d = rc.requested_digest;
  if (!d || rc.approved_digest !== d || rc.executed_digest !== d) fail(element, "requested, approved and executed digests differ");
  for (const a of rc.approvers) {
    if (a.digest_seen !== d) fail(element, `approver ${a.user_id} saw another digest`);
    if (a.effect_seen && a.effect_seen !== rc.effect_digest) fail(element, `approver ${a.user_id} was shown another effect preview`);
  }
  if (rc.arguments !== undefined && digest(rc.arguments) !== d) fail(element, "its arguments do not hash to its requested digest");
  if (rc.resource_set !== undefined && digest(rc.resource_set) !== rc.resource_set_digest) {
    fail(element, "the batch's targets do not hash to its resource set digest");
  }
  const m = rc.mandate;
  let unchecked = [];
  if (m) {
    if (rc.approvers.length !== 0) fail(element, `it names mandate ${m.id} and approvers`);
    if (m.grantors.length < Math.max(m.quorum, 1)) fail(element, `mandate ${m.id} has fewer grantors than its tier's quorum`);
    for (const g of m.grantors) {
      if (g.digest_seen !== m.terms_digest) fail(element, `grantor ${g.user_id} of mandate ${m.id} saw another digest than its terms`);
    }
    unchecked = checkTerms(rc, element);
    checkApprovers(m.grantors, m.proposal_id, m.terms_digest, m.confirmation);
  } else if (rc.approvers.length < Math.max(rc.quorum, 1)) fail(element, "fewer approvers than the quorum");
  if (!m) checkApprovers(rc.approvers, rc.proposal_id, d, rc.confirmation);
  let created = 0;
  let outcome = 0;
  let issued = 0;
  let granted = 0;
  let require = null;
  let factors = null;
  let otherReceipt = false;
  let issuedEntry = null;
  const same = (a, b) => Array.isArray(a) && a.length === b.length && a.every((v, i) => v === b[i]);
  const sameSet = (a, b) => Array.isArray(a) && same([...a].sort(), [...b].sort());
  const approverIDs = rc.approvers.map((a) => a.user_id);
  // The approvals the chain records, of the write and of the mandate's
  // grant: each must be the one the receipt names, in every detail it
  // states (checkApproval), and there must be no other.
  const decisions = new Map();
  const grants = new Map();
  for (const [seq, e] of bySeq) {
    if (e.body.kind === "decision.approved" && e.body.proposal_id === rc.proposal_id) {
      decisions.set(e.body.data.decision_id, e);
    }
    if (m && e.body.kind === "decision.approved" && e.body.proposal_id === m.proposal_id) grants.set(e.body.data.decision_id, e);
    if (m && e.body.kind === "mandate.granted" && e.body.data.mandate_id === m.id) {
      if (e.body.proposal_id !== m.proposal_id || e.body.data.terms_digest !== m.terms_digest ||
        !same(e.body.data.grantors, m.grantors.map((g) => g.user_id)) ||
        !same(e.body.data.decisions, m.grantors.map((g) => g.decision_id))) {
        fail(element, `the chain records another grant of mandate ${m.id} than the receipt`);
      }
      granted = seq;
    }
    if (e.body.proposal_id !== rc.proposal_id) continue;
    if (e.body.kind === "token.issued" && e.body.data.jti === rc.jti) {
      if ((e.body.data.mandate_id || "") !== (m ? m.id : "")) fail(element, "the chain issued the token under another mandate than the receipt names");
      issuedEntry = e;
      issued = seq;
      factors = e.body.data.factors || null;
    }
    if (e.body.kind === "proposal.created" && e.body.data.args_digest === d) {
      created = seq;
      require = e.body.data.require || null;
      // The targets too: a receipt re-signed with a leaked key cannot name
      // other targets (with a digest of its own) than were proposed.
      const c = e.body.data;
      if (c.request_key !== rc.request_key || c.tool !== rc.tool || c.policy_version !== rc.policy_version ||
        (c.resource || "") !== (rc.resource || "") || (c.resource_set_digest || "") !== (rc.resource_set_digest || "")) {
        fail(element, "the proposal's creation records another request key, tool, policy or targets than the receipt");
      }
    }
    if (e.body.kind === "execution.outcome" && e.body.data.execution_id === rc.execution_id && e.body.data.status === rc.status) {
      outcome = seq;
      if (e.body.data.result_digest !== rc.result_digest) fail(element, "the chain records another result");
      // The chain records the hash of the receipt the server signed: a
      // receipt signed again, whatever it says, is not that one.
      // (Said after the approvals, which name what differs.)
      otherReceipt = Boolean(e.body.data.receipt_digest) && e.body.data.receipt_digest !== sha256(text);
    }
  }
  checkApprovals(rc.approvers, decisions, element, "approval");
  if (m && granted) checkApprovals(m.grantors, grants, `${element}: mandate ${m.id}`, "grant approval");
  if (issuedEntry && issuedEntry.body.data.approvers !== undefined && !sameSet(issuedEntry.body.data.approvers, approverIDs)) {
    fail(`audit entry ${issuedEntry.seq} (line ${issuedEntry.line})`,
      `the token was issued on the approvals of ${issuedEntry.body.data.approvers.join(", ")}, the receipt names ${approverIDs.join(", ")}`);
  }
  if (otherReceipt) fail(element, "the chain records another receipt for this execution");
  if (m) checkUse(rc, element);
  if (!created) fail(element, "the proposal's creation is not in the chain");
  if (!issued) fail(element, "the token's issue is not in the chain");
  if (m && !granted) fail(element, `the grant of mandate ${m.id} is not in the chain`);
  if (!outcome) fail(element, "the execution's outcome is not in the chain");
  if (!m && require && require.length) {
    checkGroups(rc.approvers.map((a) => a.user_id), rc.quorum, require, factors, issued, "the token was issued", element);
  }
  if (m && granted) {
    const asked = [...bySeq.values()].find((e) => e.body.kind === "proposal.created" && e.body.proposal_id === m.proposal_id);
    const grant = bySeq.get(granted);
    if (asked && asked.body.data.require && asked.body.data.require.length) {
      checkGroups(m.grantors.map((g) => g.user_id), m.quorum, asked.body.data.require, grant.body.data.factors || null, granted,
        "the mandate was granted", `${element}: mandate ${m.id}`);
    }
  }
  if (anchored < outcome) fail(element, "no signed checkpoint covers the outcome");
  const who = (list) => list.map((a) => `${a.name || a.user_id} (${a.method})`).join(", ");
  const how = m
    ? `confirmed by mandate ${m.id} (terms ${m.terms_digest}) granted by ${who(m.grantors)}; the write fits its terms, ${checkUse(rc, element)}` +
      (unchecked.length ? ` (not checkable from the receipt: ${unchecked.join(", ")})` : "")
    : `approved by ${who(rc.approvers)}`;
  const effect = rc.effect_digest ? `, effect ${rc.effect_digest}` : "";
  console.log(`ok   ${element}: ${rc.tool} ${d} ${how}${effect}, ${rc.status}; chain entries ${created}..${outcome} under checkpoint ${anchored}`);
}
if (!opts.receipt) {
  const receiptsRecorded = checkWhole();
  console.log(`ok   receipts: the export holds each of the ${receiptsRecorded} receipt${receiptsRecorded === 1 ? "" : "s"} the chain records, once`);
}
console.log("VERIFIED");
