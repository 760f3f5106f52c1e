"""Hostile version 2 B-trees (a dense group's name index) and fractal heaps,
from fixtures/hdf5/dense.h5 (a dense group whose index is one leaf).

usage: scripts/hostile_hdf5_btree2.py CASE OUT [N] [K] [PAD]
  shared: the index becomes depth 1: a root of K records whose K+1 children
          are all one leaf of N records (each naming the fixture's first link)
  cycle:  depth 2: the root's first child is the root itself
  depth-lie: header says depth 3, the root is a leaf
  count-lie: the root claims N records in its node size
  heap-shared: the heap's root becomes an indirect block listing the real
          direct block in its first two slots
PAD bytes of zeros appended (a big file has a big total-records allowance).
Checksums (Jenkins lookup3) of every block written are recomputed.
Made fixtures/fuzz-regressions/hdf5_file/bt2-*.h5 and heap-direct-block-twice.h5
(shared, cycle, depth-lie, count-lie, heap-shared; N = K = 1000, count-lie N = 400).
`shared OUT 65535 65534 100000000` is the 100 MB file of the fuzz README's table."""
import os, struct, sys

def rot(x, k): return ((x << k) | (x >> (32 - k))) & 0xffffffff

def lookup3(data, initval=0):
    """Jenkins lookup3 hashlittle, as H5_checksum_lookup3."""
    length = len(data)
    a = b = c = (0xdeadbeef + length + initval) & 0xffffffff
    i = 0
    M = 0xffffffff
    while length > 12:
        a = (a + int.from_bytes(data[i:i+4], 'little')) & M
        b = (b + int.from_bytes(data[i+4:i+8], 'little')) & M
        c = (c + int.from_bytes(data[i+8:i+12], 'little')) & M
        a = (a - c) & M; a ^= rot(c, 4); c = (c + b) & M
        b = (b - a) & M; b ^= rot(a, 6); a = (a + c) & M
        c = (c - b) & M; c ^= rot(b, 8); b = (b + a) & M
        a = (a - c) & M; a ^= rot(c, 16); c = (c + b) & M
        b = (b - a) & M; b ^= rot(a, 19); a = (a + c) & M
        c = (c - b) & M; c ^= rot(b, 4); b = (b + a) & M
        length -= 12; i += 12
    if length == 0:
        return c
    tail = data[i:] + b'\0' * (12 - length)
    a = (a + int.from_bytes(tail[0:4], 'little')) & M
    b = (b + int.from_bytes(tail[4:8], 'little')) & M
    c = (c + int.from_bytes(tail[8:12], 'little')) & M
    c ^= b; c = (c - rot(b, 14)) & M
    a ^= c; a = (a - rot(c, 11)) & M
    b ^= a; b = (b - rot(a, 25)) & M
    c ^= b; c = (c - rot(b, 16)) & M
    a ^= c; a = (a - rot(c, 4)) & M
    b ^= a; b = (b - rot(a, 14)) & M
    c ^= b; c = (c - rot(b, 24)) & M
    return c

def seal(b, start, end):
    """Writes the checksum of b[start:end] at end."""
    struct.pack_into('<I', b, end, lookup3(bytes(b[start:end])))

def enc_size(x):
    return (max(x, 1).bit_length() - 1) // 8 + 1

src = os.path.join(os.path.dirname(__file__), '..', 'fixtures', 'hdf5', 'dense.h5')
b = bytearray(open(src, 'rb').read())
# sanity: the fixture's own header checksum is what lookup3 gives
bt = b.index(b'BTHD')
HDR = 4 + 1 + 1 + 4 + 2 + 2 + 1 + 1 + 8 + 2 + 8
assert struct.unpack_from('<I', b, bt + HDR)[0] == lookup3(bytes(b[bt:bt + HDR])), 'lookup3'
node_size, record, depth = struct.unpack_from('<IHH', b, bt + 6)
root, root_recs, total = struct.unpack_from('<QHQ', b, bt + 16)
assert depth == 0
rec0 = bytes(b[root + 6: root + 6 + record])
case, out = sys.argv[1], sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
K = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
PAD = int(sys.argv[5]) if len(sys.argv) > 5 else 0

def leaf(n):
    at = len(b)
    b.extend(b'BTLF' + bytes([0, 5]) + rec0 * n + b'\0' * 4)
    seal(b, at, len(b) - 4)
    return at

def header(node_size, depth, root, root_recs, total):
    struct.pack_into('<IHH', b, bt + 6, node_size, record, depth)
    struct.pack_into('<QHQ', b, bt + 16, root, root_recs, total)
    seal(b, bt, bt + HDR)

if case == 'shared':
    ptr = 0
    # node size: room for the root; the pointer width follows from it
    for _ in range(3):
        size = 6 + K * record + (K + 1) * (8 + ptr) + 4
        size = max(size, 6 + N * record + 4)
        ptr = enc_size((size - 10) // record)
    lf = leaf(N)
    at = len(b)
    b.extend(b'BTIN' + bytes([0, 5]) + rec0 * K
             + (struct.pack('<Q', lf) + N.to_bytes(ptr, 'little')) * (K + 1) + b'\0' * 4)
    seal(b, at, len(b) - 4)
    b.extend(b'\0' * PAD)
    header(size, 1, at, K, min(len(b) // record, K + (K + 1) * N))
elif case == 'cycle':
    lf = leaf(1)
    # depth 2; node size 512: pointers of 8 + 1 (+ totals 2 at depth 2)
    sizes_rec = enc_size((512 - 10) // record)
    at = len(b)
    body = b'BTIN' + bytes([0, 5]) + rec0
    total_w = 2
    body += struct.pack('<Q', at) + (1).to_bytes(sizes_rec, 'little') + (3).to_bytes(total_w, 'little')
    body += struct.pack('<Q', lf) + (1).to_bytes(sizes_rec, 'little') + (1).to_bytes(total_w, 'little')
    b.extend(body + b'\0' * 4)
    seal(b, at, len(b) - 4)
    header(512, 2, at, 1, 5)
elif case == 'depth-lie':
    header(node_size, 3, root, root_recs, total)
elif case == 'count-lie':
    header(node_size, 0, root, N, N)
elif case == 'heap-shared':
    fr = b.index(b'FRHP')
    width, start_block, max_direct = struct.unpack_from('<HQQ', b, fr + 110)
    hroot, rows = struct.unpack_from('<QH', b, fr + 132)
    bits = struct.unpack_from('<H', b, fr + 128)[0]
    ob = (bits + 7) // 8
    assert rows == 0
    at = len(b)
    # 2 slots in one row: the same direct block twice (width 2, one row)
    fhib = b'FHIB' + bytes([0]) + struct.pack('<Q', fr) + (0).to_bytes(ob, 'little')
    fhib += struct.pack('<Q', hroot) * 2
    b.extend(fhib + b'\0' * 4)
    seal(b, at, len(b) - 4)
    struct.pack_into('<HQQ', b, fr + 110, 2, start_block, start_block)
    struct.pack_into('<QH', b, fr + 132, at, 1)
    # the heap header's checksum covers everything before it
    hlen = 142
    flt = struct.unpack_from('<H', b, fr + 7)[0]
    assert flt == 0
    seal(b, fr, fr + hlen)
    # a second record naming the same object through the second block
    rid = rec0[4:]
    off = int.from_bytes(rid[1:1 + ob], 'little')
    rec1 = rec0[:4] + rid[:1] + (off + start_block).to_bytes(ob, 'little') + rid[1 + ob:]
    lf = len(b)
    b.extend(b'BTLF' + bytes([0, 5]) + rec0 + rec1 + b'\0' * 4)
    seal(b, lf, len(b) - 4)
    header(node_size, 0, lf, 2, 2)
else:
    sys.exit('unknown case')
struct.pack_into('<Q', b, 28, len(b))   # superblock v2/3: end of file
seal(b, 0, 44)                          # superblock v2/3 checksum
open(out, 'wb').write(b)
print(out, len(b))
