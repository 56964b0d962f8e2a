// The proof of work a waiting room may ask for before a join, done off the page's thread (a
// Web Worker). Given {challenge, difficulty}, it answers {answer}: the first number from 0 up
// such that SHA-256(the challenge's UTF-8 bytes, then the number as 8 bytes little-endian)
// starts with `difficulty` zero bits. SHA-256 is written out here: the browser's own
// (crypto.subtle) exists only on HTTPS pages, and one call a hash would be slower.
'use strict';

var K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2
]);
var W = new Uint32Array(64);

// SHA-256 of a whole message already padded to blocks of 64 bytes; the digest's first word
// and second word are all the leading-zero count needs (difficulty is at most 24 here, 32 in
// the protocol).
function digestHead(blocks) {
  var h0 = 0x6a09e667, h1 = 0xbb67ae85, h2 = 0x3c6ef372, h3 = 0xa54ff53a;
  var h4 = 0x510e527f, h5 = 0x9b05688c, h6 = 0x1f83d9ab, h7 = 0x5be0cd19;
  for (var off = 0; off < blocks.length; off += 64) {
    for (var t = 0; t < 16; t++) {
      var i = off + 4 * t;
      W[t] = (blocks[i] << 24) | (blocks[i + 1] << 16) | (blocks[i + 2] << 8) | blocks[i + 3];
    }
    for (t = 16; t < 64; t++) {
      var x = W[t - 15], y = W[t - 2];
      var s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
      var s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
      W[t] = (W[t - 16] + s0 + W[t - 7] + s1) | 0;
    }
    var a = h0, b = h1, c = h2, d = h3, e = h4, f = h5, g = h6, h = h7;
    for (t = 0; t < 64; t++) {
      var S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      var t1 = (h + S1 + ((e & f) ^ (~e & g)) + K[t] + W[t]) | 0;
      var S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      var t2 = (S0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
    }
    h0 = (h0 + a) | 0; h1 = (h1 + b) | 0; h2 = (h2 + c) | 0; h3 = (h3 + d) | 0;
    h4 = (h4 + e) | 0; h5 = (h5 + f) | 0; h6 = (h6 + g) | 0; h7 = (h7 + h) | 0;
  }
  return [h0 >>> 0, h1 >>> 0];
}

function leadingZeros(head) {
  return head[0] === 0 ? 32 + Math.clz32(head[1]) : Math.clz32(head[0]);
}

function solve(challenge, difficulty) {
  var text = new TextEncoder().encode(challenge);
  var length = text.length + 8;
  // The message, its 0x80 byte, zeros, and its length in bits as 8 bytes big-endian.
  var blocks = new Uint8Array(Math.ceil((length + 9) / 64) * 64);
  blocks.set(text, 0);
  blocks[length] = 0x80;
  var bits = length * 8;
  var view = new DataView(blocks.buffer);
  view.setUint32(blocks.length - 8, Math.floor(bits / 4294967296));
  view.setUint32(blocks.length - 4, bits >>> 0);
  for (var answer = 0; answer < Number.MAX_SAFE_INTEGER; answer++) {
    view.setUint32(text.length, answer >>> 0, true);
    view.setUint32(text.length + 4, Math.floor(answer / 4294967296), true);
    if (leadingZeros(digestHead(blocks)) >= difficulty) return answer;
  }
  return null;
}

self.onmessage = function (e) {
  self.postMessage({ answer: solve(e.data.challenge, e.data.difficulty) });
};
