// Runs s3rver (the npm fake S3 server) with an access log the tests can count: one JSON line per
// request once its response ended: method, decoded path, query, status, Range, bytes announced
// and whether the client went away before the end. Used by s3.py; not a test itself.
//
//   node s3rver_run.js DIR ADDRESS PORT BUCKET ACCESS_LOG
'use strict';
const crypto = require('crypto');
const fs = require('fs');

// s3rver makes its ListObjectsV2 continuation tokens opaque with DES, which OpenSSL 3 only has
// in its legacy provider (Node 17+ fails every second listing page with "digital envelope
// routines::unsupported"). Where DES is missing, tokens go out in the clear: they only need to
// round-trip.
for (const name of ['createCipheriv', 'createDecipheriv']) {
  const orig = crypto[name];
  crypto[name] = function (alg, ...rest) {
    if (alg === 'des') {
      try {
        return orig.call(this, alg, ...rest);
      } catch (e) {
        return {
          update: (d, enc) => (Buffer.isBuffer(d) ? d : Buffer.from(d, enc)),
          final: () => Buffer.alloc(0),
        };
      }
    }
    return orig.call(this, alg, ...rest);
  };
}

const S3rver = require('s3rver');

const [, , dir, address, port, bucket, logPath] = process.argv;
const log = fs.createWriteStream(logPath, { flags: 'a' });
const server = new S3rver({
  directory: dir,
  address,
  port: Number(port),
  silent: true,
  configureBuckets: [{ name: bucket }],
});
// First in the chain, so it sees every request, errors included.
server.middleware.unshift(async (ctx, next) => {
  const t0 = Date.now();
  let ended = false;
  const write = (aborted) => {
    if (ended) return;
    ended = true;
    let path = ctx.path;
    try {
      path = decodeURIComponent(ctx.path);
    } catch (e) {}
    log.write(JSON.stringify({
      time: t0 / 1000,
      method: ctx.method,
      path,
      query: ctx.querystring,
      status: ctx.status,
      range: ctx.get('range') || '',
      length: ctx.response.length || 0,
      aborted,
      ms: Date.now() - t0,
    }) + '\n');
  };
  ctx.res.on('finish', () => write(false));
  ctx.res.on('close', () => write(!ctx.res.writableFinished));
  await next();
});
server.run().then(({ address: a, port: p }) => {
  console.log(`S3rver listening on ${a}:${p}`);
}).catch((err) => {
  console.error(err);
  process.exit(1);
});
