/** HPACK: the examples of RFC 7541 Appendix C, a round trip of the encoder, and hostile header blocks. */
import assert from 'node:assert/strict';
import { HpackDecoder, HpackError, encodeHeaderBlock } from '../../../src/api/hpack.js';

type Field = [string, string];

/** Bytes from an RFC-style hex dump ("8286 8441 ..."). */
const hex = (dump: string) => Buffer.from(dump.replace(/\s+/g, ''), 'hex');

const NO_LIMIT = 1 << 30;

/** Decodes `block` and checks its fields and that nothing was cut. */
function assertDecodes(decoder: HpackDecoder, block: Buffer, fields: Field[]): void {
  assert.deepEqual(decoder.decode(block, NO_LIMIT), { fields, tooLarge: false });
}

/**
 * Checks the dynamic table, newest first, by decoding a block of indices 62.. (indexed fields leave the
 * table as it is). With `exact`, also that there is no further entry, which fails the decoder for good.
 */
function assertTable(decoder: HpackDecoder, entries: Field[], { exact = false } = {}): void {
  const indices = Buffer.from(entries.map((_, i) => 0x80 | (62 + i)));
  assertDecodes(decoder, indices, entries);
  if (exact) assert.throws(() => decoder.decode(Buffer.from([0x80 | (62 + entries.length)]), NO_LIMIT), HpackError);
}

/** Checks that `block` is refused as malformed, for the reason `message` matches. */
function assertMalformed(block: Buffer, message: RegExp, decoder = new HpackDecoder()): void {
  assert.throws(() => decoder.decode(block, NO_LIMIT), (e) => e instanceof HpackError && message.test(e.message));
}

const REQUEST_1: Field[] = [[':method', 'GET'], [':scheme', 'http'], [':path', '/'], [':authority', 'www.example.com']];
const REQUEST_2: Field[] = [...REQUEST_1, ['cache-control', 'no-cache']];
const REQUEST_3: Field[] = [[':method', 'GET'], [':scheme', 'https'], [':path', '/index.html'], [':authority', 'www.example.com'], ['custom-key', 'custom-value']];

const DATE_1: Field = ['date', 'Mon, 21 Oct 2013 20:13:21 GMT'];
const DATE_2: Field = ['date', 'Mon, 21 Oct 2013 20:13:22 GMT'];
const LOCATION: Field = ['location', 'https://www.example.com'];
const PRIVATE: Field = ['cache-control', 'private'];
const GZIP: Field = ['content-encoding', 'gzip'];
const COOKIE: Field = ['set-cookie', 'foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1'];
const RESPONSE_1: Field[] = [[':status', '302'], PRIVATE, DATE_1, LOCATION];
const RESPONSE_2: Field[] = [[':status', '307'], PRIVATE, DATE_1, LOCATION];
const RESPONSE_3: Field[] = [[':status', '200'], PRIVATE, DATE_2, LOCATION, GZIP, COOKIE];

/** C.3/C.4: three requests on one connection. */
function checkRequests(blocks: [Buffer, Buffer, Buffer]): void {
  const decoder = new HpackDecoder();
  assertDecodes(decoder, blocks[0], REQUEST_1);
  assertTable(decoder, [[':authority', 'www.example.com']]);
  assertDecodes(decoder, blocks[1], REQUEST_2);
  assertTable(decoder, [['cache-control', 'no-cache'], [':authority', 'www.example.com']]);
  assertDecodes(decoder, blocks[2], REQUEST_3);
  assertTable(decoder, [['custom-key', 'custom-value'], ['cache-control', 'no-cache'], [':authority', 'www.example.com']], { exact: true });
}

/** C.5/C.6: three responses on one connection with a 256-octet table, which evicts. */
function checkResponses(blocks: [Buffer, Buffer, Buffer]): void {
  const decoder = new HpackDecoder(256);
  assertDecodes(decoder, blocks[0], RESPONSE_1);
  assertTable(decoder, [LOCATION, DATE_1, PRIVATE, [':status', '302']]);
  assertDecodes(decoder, blocks[1], RESPONSE_2);
  assertTable(decoder, [[':status', '307'], LOCATION, DATE_1, PRIVATE]);
  assertDecodes(decoder, blocks[2], RESPONSE_3);
  assertTable(decoder, [COOKIE, GZIP, DATE_2], { exact: true });
}

// A grpc-go unary request, Huffman-coded with incremental indexing, then the same call again: indices
// into the dynamic table and a new grpc-timeout (a literal naming the dynamic table's entry).
const GRPC_GO_FIRST = hex(
  '8386449962cb6a49a92afdc2bedb6a49a92ee2d9dcc42b1c4b620c7abf4186a0e41d139d095f8b1d75d0620d263d4c4d65647a8a9acac8b4' +
    'c7602bb8f2e14082497f864d833505b11f40899acac8b24d494f6a7f860befbefbcddb',
);
const GRPC_GO_AGAIN = hex('8386c3c2c1c0bf0f2f860befbefba2b7');
const GRPC_GO_FIELDS: Field[] = [
  [':method', 'POST'],
  [':scheme', 'http'],
  [':path', '/runtime.v1.RuntimeService/Version'],
  [':authority', 'localhost'],
  ['content-type', 'application/grpc'],
  ['user-agent', 'grpc-go/1.68.1'],
  ['te', 'trailers'],
];

/** Every octet 0..255 in order, Huffman-coded (583 octets): checks each code of Appendix B. */
const EVERY_OCTET_HUFFMAN = hex(
    'ffc7fffd8fffffe2fffffe3fffffe4fffffe5fffffe6fffffe7fffffe8ffffeafffffff3fffffa7fffffabffffffdfffffebfffffecfffff' +
    'edfffffeefffffefffffff0ffffff1ffffff2fffffffbfffffcffffffd3fffffd7fffffdbfffffdffffffe3fffffe7fffffebfffffed4fe3' +
    'f9ffaffcabf1febfafefe7fdfd2cbb00089969b71d79fb9f7fff20ffbff3ff50ddbd7f061c58f265cd9f469d5af66dddbf871e5f9cff7ff7' +
    'fffc3ff9ffe45fff4719242cb34e6e9d68a6a3d7dac426defe3cfaf7fffbfe7ffbffdffffffcfffe6ffff4bfff9ffffa3fffd3ffff53fffd' +
    '5ffffb3fffeb7fffdaffffb7ffff73fffeeffffdeffffebffffbfffffd9ffffdbfffebffffe0ffffeeffffc3ffff8bffff1ffffe4fffee7f' +
    'ffb1ffff97fffd9ffffcdffff9fffffbffffdafffeeffff4ffffb7fffee7fffe8ffffd3fffdeffffd5fffeeffffbdffffe1fffdfffff7fff' +
    'ff5ffffecffff07fff87fffe0ffff17fffedffff87ffff77fffeffffeaffff8bfffe3ffff93ffff87fffcbffff37ffff1fffff83ffffe1ff' +
    'febfffe3ffff3fffff2ffffa3ffffd9fffff17ffffc7fffff27ffffdefffffbffffff2fffff8fffffb7fff97fff8fffffe6fffffc1fffff8' +
    '7ffffe7fffffc5ffffe5fffe4ffff2fffffd1fffff4ffffffefffffe3fffffc9fffff97fffb3ffffcffffb7fffcdffff4ffff9ffffd1ffff' +
    'cffffeaffffafffffddffffeffffff4fffff5fffffabffffa7ffffd7fffff9bffffecfffffb7fffff3fffffe8fffffd3fffffabfffff5fff' +
    'ffff7ffffecfffffdbfffffbbfffff7ffffff0fffffbbf',
);

describe('HPACK', () => {
  describe('RFC 7541 Appendix C', () => {
    it('C.2.1 literal with indexing', () => {
      const decoder = new HpackDecoder();
      assertDecodes(decoder, hex('400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572'), [['custom-key', 'custom-header']]);
      assertTable(decoder, [['custom-key', 'custom-header']], { exact: true });
    });

    it('C.2.2 literal without indexing', () => {
      const decoder = new HpackDecoder();
      assertDecodes(decoder, hex('040c 2f73 616d 706c 652f 7061 7468'), [[':path', '/sample/path']]);
      assertTable(decoder, [], { exact: true });
    });

    it('C.2.3 literal never indexed', () => {
      const decoder = new HpackDecoder();
      assertDecodes(decoder, hex('1008 7061 7373 776f 7264 0673 6563 7265 74'), [['password', 'secret']]);
      assertTable(decoder, [], { exact: true });
    });

    it('C.2.4 indexed field', () => {
      const decoder = new HpackDecoder();
      assertDecodes(decoder, hex('82'), [[':method', 'GET']]);
      assertTable(decoder, [], { exact: true });
    });

    it('C.3 requests without Huffman coding', () => {
      checkRequests([
        hex('8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d'),
        hex('8286 84be 5808 6e6f 2d63 6163 6865'),
        hex('8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65'),
      ]);
    });

    it('C.4 requests with Huffman coding', () => {
      checkRequests([
        hex('8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff'),
        hex('8286 84be 5886 a8eb 1064 9cbf'),
        hex('8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf'),
      ]);
    });

    it('C.5 responses without Huffman coding, evicting from a 256-octet table', () => {
      checkResponses([
        hex(`4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
             2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d`),
        hex('4803 3330 37c1 c0bf'),
        hex(`88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
             54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
             5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31`),
      ]);
    });

    it('C.6 responses with Huffman coding, evicting from a 256-octet table', () => {
      checkResponses([
        hex(`4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
             2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3`),
        hex('4883 640e ffc1 c0bf'),
        hex(`88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
             77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
             9587 3160 65c0 03ed 4ee5 b106 3d50 07`),
      ]);
    });
  });

  describe('decoder', () => {
    it('decodes a grpc-go request and the next one from the dynamic table', () => {
      const decoder = new HpackDecoder();
      assertDecodes(decoder, GRPC_GO_FIRST, [...GRPC_GO_FIELDS, ['grpc-timeout', '1999985u']]);
      assertDecodes(decoder, GRPC_GO_AGAIN, [...GRPC_GO_FIELDS, ['grpc-timeout', '1999972u']]);
    });

    it('accepts two size updates at the start of a block; a smaller table evicts', () => {
      const decoder = new HpackDecoder();
      assertDecodes(decoder, hex('400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572'), [['custom-key', 'custom-header']]);
      assertDecodes(decoder, hex('3fe11f 20 82'), [[':method', 'GET']]); // 4096 then 0: emptied
      assertTable(decoder, [], { exact: true });
    });

    it('keeps fields within the list limit and decodes the rest for the table', () => {
      const decoder = new HpackDecoder();
      // Two literals with indexing; the limit lets only the first through (size 32 + 10 + 13).
      const block = hex('400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572 4001 6101 62');
      assert.deepEqual(decoder.decode(block, 55), { fields: [['custom-key', 'custom-header']], tooLarge: true });
      assertTable(decoder, [['a', 'b'], ['custom-key', 'custom-header']], { exact: true });
    });

    it('decodes every octet from its Huffman code', () => {
      const block = Buffer.concat([hex('00 81 07 ff c8 03'), EVERY_OCTET_HUFFMAN]); // name '0', value of 583 octets
      const every = Buffer.from(Array.from({ length: 256 }, (_, i) => i)).toString('latin1');
      assertDecodes(new HpackDecoder(), block, [['0', every]]);
    });

    it('decodes Huffman-coded strings that end on a symbol and in padding', () => {
      assertDecodes(new HpackDecoder(), hex('0081 07 80'), [['0', '']]); // '0' is 00000, then 3 bits of padding
    });
  });

  describe('hostile blocks', () => {
    it('rejects index 0', () => assertMalformed(hex('80'), /index 0/));
    it('rejects an index beyond the static and dynamic tables', () => {
      assertMalformed(hex('be'), /index 62 beyond the 61 entries/);
      assertMalformed(hex('7e 00'), /index 62 beyond/); // a literal's name index likewise
    });
    it('rejects a truncated integer', () => {
      assertMalformed(hex('ff'), /ends inside an integer/);
      assertMalformed(hex('ff 80'), /ends inside an integer/);
    });
    it('rejects an integer of more than 4 continuation bytes', () => assertMalformed(hex('ff ff ff ff ff 0f'), /more than 4 continuation bytes/));
    it('rejects a string longer than the rest of the block', () => {
      assertMalformed(hex('00 05 61'), /5 octets runs past the end/);
      assertMalformed(hex('00 7f ff ff ff 7f 61'), /268435582 octets runs past/); // 2^28 + 126 octets
      assertMalformed(hex('00 01 61'), /ends before a string/); // the value is missing
    });
    it('rejects a Huffman-coded EOS', () => assertMalformed(hex('00 84 ffffffff 00'), /contains EOS/));
    it('rejects Huffman padding of 8 bits or more', () => {
      assertMalformed(hex('00 81 ff 00'), /padding/);
      assertMalformed(hex('00 82 1fff 00'), /padding/); // 'a' (00011) and 11 bits of ones
    });
    it('rejects Huffman padding that is not all ones', () => assertMalformed(hex('00 81 18 00'), /padding/)); // 'a' and 000
    it('rejects a table size update above the advertised maximum', () => {
      assertDecodes(new HpackDecoder(), hex('3fe11f'), []); // 4096: fine
      assertMalformed(hex('3fe21f'), /4097 octets, above the 4096/); // 4097
      assertMalformed(hex('21'), /1 octets, above the 0/, new HpackDecoder(0));
    });
    it('rejects a table size update after a field', () => assertMalformed(hex('82 20'), /size update after a header field/));
    it('rejects a third table size update', () => assertMalformed(hex('20 20 20'), /more than two/));

    it('is unusable after a malformed block', () => {
      const decoder = new HpackDecoder();
      assertMalformed(hex('80'), /index 0/, decoder);
      assertMalformed(hex('82'), /lost to an earlier malformed block/, decoder);
    });

    it('defuses an HPACK bomb: one big entry referenced thousands of times', () => {
      const big = 'a'.repeat(4000);
      const references = 16_000;
      const block = Buffer.concat([hex('40 01 78 7f a1 1e'), Buffer.from(big, 'latin1'), Buffer.alloc(references, 0xbe)]);
      const decoder = new HpackDecoder();
      const started = process.hrtime.bigint();
      const { fields, tooLarge } = decoder.decode(block, 16 << 10);
      const micros = Number(process.hrtime.bigint() - started) / 1000;
      assert.equal(tooLarge, true);
      assert.equal(fields.length, 4, 'as many as fit in 16 KiB at 4033 octets each');
      assert.deepEqual(fields[0], ['x', big]);
      // The table is in step: the entry is still there for the next block.
      assertDecodes(decoder, hex('be'), [['x', big]]);
      console.log(`      HPACK bomb of ${references} references to a 4000-octet entry: ${micros.toFixed(0)} µs`);
    });
  });

  describe('encoder', () => {
    it('uses the static table: an index for a whole match, its name otherwise, else a literal', () => {
      assert.deepEqual(encodeHeaderBlock([[':status', '200']]), hex('88'));
      assert.deepEqual(encodeHeaderBlock([['content-type', 'application/grpc']]), Buffer.concat([hex('0f10 10'), Buffer.from('application/grpc')]));
      assert.deepEqual(encodeHeaderBlock([['grpc-status', '0']]), Buffer.concat([hex('000b'), Buffer.from('grpc-status'), hex('0130')]));
      assert.deepEqual(encodeHeaderBlock([]), hex(''));
    });

    it('round-trips through the decoder without touching its dynamic table', () => {
      const fields: Field[] = [
        [':status', '200'],
        ['content-type', 'application/grpc'],
        ['grpc-status', '0'],
        ['grpc-message', ''],
        ['accept-encoding', 'gzip, deflate'],
        [':authority', ''],
        ['x-big', 'v'.repeat(20 << 10)],
        ['x-octets', '\u0000\u007f\u0080\u00ff'],
      ];
      const decoder = new HpackDecoder(0);
      assertDecodes(decoder, encodeHeaderBlock(fields), fields);
      assertTable(decoder, [], { exact: true });
    });
  });

  it('decodes a typical grpc-go request quickly (figures, not assertions)', () => {
    const runs = 100_000;
    const decoder = new HpackDecoder();
    decoder.decode(GRPC_GO_FIRST, NO_LIMIT);
    let started = process.hrtime.bigint();
    for (let i = 0; i < runs; i++) decoder.decode(GRPC_GO_AGAIN, NO_LIMIT);
    const again = Number(process.hrtime.bigint() - started) / 1e6;
    started = process.hrtime.bigint();
    for (let i = 0; i < runs; i++) new HpackDecoder().decode(GRPC_GO_FIRST, NO_LIMIT);
    const first = Number(process.hrtime.bigint() - started) / 1e6;
    console.log(`      ${runs} grpc-go blocks: ${again.toFixed(0)} ms from the dynamic table, ${first.toFixed(0)} ms all Huffman literals on a new decoder`);
  });
});
