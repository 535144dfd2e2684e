#!/usr/bin/env python3
"""seeds.py - write the seed corpora of the fuzz harnesses into tests/fuzz/.

Run from anywhere; the files it writes are committed. Each harness's input
format is described at the top of its source (tests/fuzz/fuzz_*.c).

    tests/fuzz/seeds.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
K = 0x9E3779B97F4A7C15
M = (1 << 64) - 1


def frame_sum(data):
    """pd_frame_sum of src/ps/proto.c (docs/protocol.md): 64 lanes of 32 bits."""
    lanes = [(l * 0x85EBCA77 + 1) & 0xFFFFFFFF for l in range(64)]
    n = len(data)
    padded = data + bytes(-n % 4)
    words = struct.unpack("<%dI" % (len(padded) // 4), padded)
    for i, w in enumerate(words):
        x = ((lanes[i % 64] ^ w) * 0x9E3779B1) & 0xFFFFFFFF
        lanes[i % 64] = x ^ (x >> 15)
    h = n
    for lane in lanes[:64 if n >= 256 else len(words)]:
        h = ((h ^ lane) * K) & M
        h ^= h >> 29
    return (h ^ (h >> 32)) & 0xFFFFFFFF


TYPES = {"HELLO": 1, "CHALLENGE": 2, "AUTH": 3, "WELCOME": 4, "INIT_BLOCK": 10, "INIT_ROWS": 11,
         "INIT_DONE": 12, "READY": 13, "PUSH_BLOCK": 20, "BLOCK_VALUES": 21, "PULL_BLOCK": 22,
         "PUSH_ROWS": 30, "ROWS_DONE": 31, "PULL_ROWS": 32, "ROWS": 33, "PASS_END": 40, "PASS_DONE": 41,
         "DECIDE": 42, "DECIDED": 43,
         "SAVE": 50, "SAVED": 51, "FINISH": 60, "ERROR": 90,
         "PULL_KEYS": 34, "KEY_ROWS": 35, "PUSH_KEYS": 36, "DUMP_KEYS": 37, "KEY_DUMP": 38}
# the record kinds of fuzz_server.c: its types[] in this order, then these
KINDS = list(TYPES)
GOOD_HELLO, RAW = len(KINDS), len(KINDS) + 1


def frame(name, a=0, b=0, payload=b""):
    return struct.pack("<IHHIIII", 0x53504450, 3, TYPES[name], len(payload), a, b, frame_sum(payload)) + payload


def record(kind, a=0, b=0, payload=b""):
    k = KINDS.index(kind) if isinstance(kind, str) else kind
    return struct.pack("<BIIH", k, a, b, len(payload)) + payload


def floats(*v):
    return struct.pack("<%df" % len(v), *v)


def u64s(*v):
    return struct.pack("<%dQ" % len(v), *v)


def u32s(*v):
    return struct.pack("<%dI" % len(v), *v)


def write(harness, name, data):
    d = os.path.join(HERE, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def proto():
    hello = bytes(range(64))
    write("proto", "hello", b"\x00" + frame("HELLO", 1, 0, hello))
    write("proto", "handshake_split", b"\x0a" + frame("HELLO", 1, 1, hello) + frame("AUTH", 0, 0, bytes(32)))
    write("proto", "data_frames", b"\x01" + frame("PUSH_BLOCK", 3, 7, floats(*range(40))) +
          frame("PULL_BLOCK", 2) + frame("PASS_END", 1) + frame("ERROR", 6, 0, b"bad frame"))
    write("proto", "data_split", b"\x07" + frame("PUSH_ROWS", 0, 2, u32s(1, 3) + floats(1, 2, 3, 4)) +
          frame("FINISH"))
    write("proto", "bad_checksum", b"\x01" + frame("SAVE", 0, 0, b"ck")[:-2] + b"xx")


def server():
    # the model of fuzz_server.c: blocks 0 (fc x->2: 3x2), 1 (its bias), 2 (fc h->2: 4x2),
    # 3 (its bias); table 0 (the embedding, 10 rows of 2), table 1 (a growing table of width 2,
    # min_count 2: 64-bit ids); h is 2 + 2 + 2 wide
    hello = (record(GOOD_HELLO, 0, 0, bytes(16)) + record("AUTH", 0, 0, bytes(32)))
    write("server_hello", "good_hello_bad_auth", b"\x00" + hello)
    write("server_hello", "hello_other_job", b"\x00" + record("HELLO", 1, 0, bytes(64)))
    write("server_hello", "push_before_auth", b"\x01" + record("PUSH_BLOCK", 0, 0, floats(*[1] * 6)))
    write("server_hello", "raw_garbage", b"\x02" + record(RAW, 0, 0, b"GET / HTTP/1.0\r\n\r\n"))
    init = (record("INIT_BLOCK", 0, 0, floats(*[0.1] * 6)) + record("INIT_BLOCK", 1, 0, floats(0, 0)) +
            record("INIT_BLOCK", 2, 0, floats(*[0.2] * 12)) + record("INIT_BLOCK", 3, 0, floats(0, 0)) +
            record("INIT_ROWS", 0, 2, u32s(0, 5) + floats(1, 2, 3, 4)) +
            record("INIT_DONE", 1) + record("INIT_DONE", 1))
    step = (record("PULL_BLOCK", 0) + record("PULL_ROWS", 0, 2, u32s(5, 0)) +
            record("PUSH_BLOCK", 0, 0, floats(*[0.5] * 6)) + record("PUSH_BLOCK", 2, 0, floats(*[0.5] * 12)) +
            record("PUSH_ROWS", 0, 1, u32s(5) + floats(0.5, -0.5)))
    write("server_auth", "init", b"\x00" + init)
    write("server_auth", "one_step", b"\x00" + init + step + record("PASS_END", 0) + record("FINISH"))
    write("server_auth", "two_trainers_async", b"\x05" + init + step + step + record("PASS_END", 0))
    write("server_auth", "save", b"\x08" + init + record("SAVE", 0, 0, b"ck/pass-0") + record("FINISH"))
    keys = (record("PULL_KEYS", 1, 2, u64s(7, 1 << 40)) +
            record("PUSH_KEYS", 1, 2, u64s(7, 1 << 40) + floats(0.5, -0.5, 1, 2)) + record("DUMP_KEYS", 1, 0))
    # a pass number past the limit (its pass + 1 overflowed an int)
    write("server_auth", "pass_end_huge", b"\x00" + init + record("PASS_END", 0x7fffffff) + record("FINISH"))
    write("server_auth", "growing_table", b"\x00" + init + keys + keys + record("PASS_END", 0) + record("FINISH"))
    write("server_auth", "bad_keys", b"\x00" + init + record("PUSH_KEYS", 1, 3, u64s(7)) + record("PULL_KEYS", 0, 1, u64s(7)))
    write("server_auth", "bad_block", b"\x02" + init + record("PUSH_BLOCK", 9, 0, floats(1)))


RECIPES = {
    "minimal.lua": """data { train = "x.csv" }
model = function(nn)
  local x, y = nn.data("x", 4), nn.data("y", 1)
  return nn.square_error_cost(nn.fc(x, 1), y)
end
optimizer = nn.sgd { learning_rate = 0.01 }
""",
    "cluster.lua": """cluster {
  hosts = { "paddle@10.0.0.1", "paddle@10.0.0.2:2222" },
  root_dir = "/home/paddle", port = 7164, ports_num = 2, ports_num_for_sparse = 1,
}
job { pservers = 2, trainers = 2 }
data { train = "train.list", test = "test.list", format = "csv", columns = { "x=1-3", "y=4" } }
model = function(nn)
  local x, y = nn.data("x", 3), nn.data("y", 1)
  local h = nn.fc(x, 8, { act = "relu", init = { "normal", 0, 0.05 } })
  return { cost = nn.square_error_cost(nn.fc(h, 1), y), predict = h }
end
optimizer = nn.momentum { learning_rate = 0.01, momentum = 0.9, nesterov = true }
settings { batch_size = 16, passes = 2, mode = "async", log_period = 5 }
""",
    "classifier.lua": """data { train = "train.svm", format = "libsvm", on_error = "skip" }
model = function(nn)
  local x, label, ids = nn.data("x", 20), nn.id("label", 3), nn.id_list("words", 100)
  local e = nn.seq_pool(nn.embedding(ids, 8, { param = "emb" }), "average")
  local h = nn.fc(nn.concat { x, e }, 16, "tanh")
  local p = nn.fc(h, 3, { act = "softmax" })
  return { cost = nn.cross_entropy(p, label), metrics = { err = nn.classification_error(p, label) } }
end
optimizer = nn.adagrad { learning_rate = 0.1 }
""",
    "sandbox.lua": """local t = {}
for i = 1, 10 do t[#t + 1] = string.format("%d", i) end
local ok, err = pcall(function() return os.execute("true") end)
assert(not ok)
data { train = "synthetic", format = "synthetic", samples = 100 }
model = function(nn)
  local x, y = nn.data("x", #t), nn.data("y", 1)
  return nn.square_error_cost(nn.fc(x, 1), y)
end
optimizer = nn.rmsprop { learning_rate = 0.001, rho = 0.9 }
settings { seed = math.floor(os.time() % 1), max_batches = 3 }
""",
    "error.lua": """data { train = "x.csv" }
cluster { prot = 7164 }
""",
}


def recipe():
    for name, text in RECIPES.items():
        write("recipe", name, text)
    with open(os.path.join(HERE, "..", "..", "recipes", "recommendation.lua")) as f:
        write("recipe", "recommendation.lua", f.read())


def readers():
    write("reader_csv", "strict", b"\x00\x03" + b"1.5,0.1,0.2,0.3,2,4\n-2,1e3,0,0.5,0,0\n3,1,2,3,3,1\n")
    write("reader_csv", "strict_test_shares", b"\x4e\x11" + b"1,0,0,0,1,1\n2,0,0,0,2,2\n3,0,0,0,3,3\n" * 3)
    write("reader_csv", "skip_header", b"\x01\x01" + b"x1;x2;x3;c;l;y\n0.1;0.2;0.3;1;4;7\nbad;line\n1;2;3;9;0;1\n")
    write("reader_csv", "crlf", b"\x01\x02" + b"h\r\n1;2;3;0;0;1\r\n\r\n4;5;6;1;1;2\r\n")
    write("reader_libsvm", "labels", b"\x00\x01" + b"0 1:0.5 3:1.5 8:2\n2 2:1 # comment\n1\n")
    write("reader_libsvm", "skip_dense", b"\x11\x13" + b"-1 1:1 2:2\n+1 4:0.25 5:-3\nbad\n0.5 3:1e-3\n")
    row = " ".join("%g" % (0.1 * k) for k in range(14))
    write("reader_uci", "rows", b"\x00\x04" + ("\n".join(row for _ in range(6)) + "\n").encode())
    write("reader_uci", "test_part_skip", b"\x03\x01" + (" %s\n  \n%s\nx y\n%s\n" % (row, row, row)).encode())
    users = "1::F::1::10::48067\n2::M::56::16::70072\n3::M::25::15::55117\n"
    movies = ("1::Toy Story (1995)::Animation|Children's|Comedy\n"
              "2::Jumanji (1995)::Adventure|Children's|Fantasy\n"
              "3::Caf\xe9 (2000)::Drama\n")
    ratings = "1::1::5::978300760\n1::2::3::978302109\n2::3::4::978301968\n3::1::1::978300275\n"
    ml = (users + "\n====\n" + movies + "\n====\n" + ratings).encode("latin-1")
    write("reader_movielens", "small", b"\x00\x01" + ml)
    write("reader_movielens", "skip_test", b"\x43\x12" + ml + b"9::9::9::9\n")


proto()
server()
recipe()
readers()
