"""PyTorch peers of paddle's benchmark models, timed the same way.

usage: torch_models.py fit_a_line HOUSING_DATA | mlp | rec | ctr | blas
       torch_models.py ctr_auc TRAIN TEST PASSES   (test AUC after each pass)
Prints one line: "<model> <samples/s>"; "blas" prints the BLAS library this
torch process actually loaded (after a matrix product), resolved through
the Debian alternatives symlinks, or "none". Threads: set OPENBLAS_NUM_THREADS
and OMP_WAIT_POLICY=PASSIVE in the environment (Debian's torch runs GEMM on
OpenBLAS threads that torch.set_num_threads does not limit).
TORCH_DEVICE=cuda runs mlp and rec on the GPU (bench/gpu.sh): the model and
every batch are on the device before the clock starts, and the clock stops
after the device has finished; TORCH_REPEAT=N times the batches N times.
"""
import os
import sys
import time

import numpy as np
import torch

torch.set_num_threads(int(os.environ.get("OPENBLAS_NUM_THREADS", "2")))
torch.manual_seed(1)
DEV = torch.device(os.environ.get("TORCH_DEVICE", "cpu"))
REPEAT = int(os.environ.get("TORCH_REPEAT", "1"))


def on_device(batches):
    return [tuple(t.to(DEV) for t in b) for b in batches]


def done():
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def timed(step, batches, warm=5):
    for b in batches[:warm]:
        step(*b)
    done()
    t0 = time.perf_counter()
    n = 0
    for _ in range(REPEAT):
        for b in batches:
            step(*b)
            n += len(b[-1])
    done()
    return n / (time.perf_counter() - t0)


def fit_a_line(path):
    rows = np.loadtxt(path, dtype=np.float32)
    x, y = rows[:, :13], rows[:, 13:14]
    x = (x - x.mean(0)) / (x.max(0) - x.min(0))
    split = int(len(rows) * 0.8)
    x, y = torch.from_numpy(x[:split].copy()), torch.from_numpy(y[:split].copy())
    model = torch.nn.Linear(13, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    batches = [(x[i:i + 20], y[i:i + 20]) for i in range(0, split, 20)] * 50

    def step(xb, yb):
        opt.zero_grad()
        loss = ((model(xb) - yb) ** 2).mean()
        loss.backward()
        opt.step()
    return timed(step, batches)


def mlp():
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    lossf = torch.nn.CrossEntropyLoss()
    batches = on_device([(torch.randn(128, 784), torch.randint(0, 10, (128,))) for _ in range(60)])

    def step(xb, yb):
        opt.zero_grad()
        lossf(model(xb), yb).backward()
        opt.step()
    return timed(step, batches)


class Rec(torch.nn.Module):
    """The PaddlePaddle book's recommender, as recipes/recommendation.lua."""
    def __init__(s):
        super().__init__()
        E = torch.nn.Embedding
        s.uid, s.gender, s.age, s.job = E(6041, 32), E(2, 16), E(7, 16), E(21, 16)
        s.uid_fc, s.gender_fc, s.age_fc, s.job_fc = (torch.nn.Linear(d, 32) for d in (32, 16, 16, 16))
        s.user_fc = torch.nn.Linear(128, 200)
        s.mid, s.genres, s.title = E(3953, 32), torch.nn.EmbeddingBag(19, 32, mode="sum"), \
            torch.nn.EmbeddingBag(5175, 32, mode="sum")
        s.mid_fc, s.genres_fc, s.title_fc = (torch.nn.Linear(32, 32) for _ in range(3))
        s.movie_fc = torch.nn.Linear(96, 200)

    def forward(s, uid, gender, age, job, mid, genres, goff, title, toff):
        u = torch.cat([s.uid_fc(s.uid(uid)), s.gender_fc(s.gender(gender)), s.age_fc(s.age(age)),
                       s.job_fc(s.job(job))], 1)
        u = torch.tanh(s.user_fc(u))
        m = torch.cat([s.mid_fc(s.mid(mid)), s.genres_fc(s.genres(genres, goff)),
                       s.title_fc(s.title(title, toff))], 1)
        m = torch.tanh(s.movie_fc(m))
        return 5 * torch.nn.functional.cosine_similarity(u, m).unsqueeze(1)


def rec():
    model = Rec().to(DEV)
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    B = 256
    batches = []
    for _ in range(60):
        glen = torch.randint(1, 4, (B,))
        tlen = torch.randint(1, 6, (B,))
        goff = torch.cat([torch.zeros(1, dtype=torch.long), glen.cumsum(0)[:-1]])
        toff = torch.cat([torch.zeros(1, dtype=torch.long), tlen.cumsum(0)[:-1]])
        batches.append((torch.randint(0, 6041, (B,)), torch.randint(0, 2, (B,)), torch.randint(0, 7, (B,)),
                        torch.randint(0, 21, (B,)), torch.randint(0, 3953, (B,)),
                        torch.randint(0, 19, (int(glen.sum()),)), goff,
                        torch.randint(0, 5175, (int(tlen.sum()),)), toff, torch.rand(B, 1) * 4 + 1))
    batches = on_device(batches)

    def step(*b):
        opt.zero_grad()
        ((model(*b[:-1]) - b[-1]) ** 2).mean().backward()
        opt.step()
    return timed(step, batches)


class CtrDnn(torch.nn.Module):
    """recipes/ctr_dnn.lua: 26 slots through one shared embedding of width 9
    over 1000001 hashed ids, the 13 dense values, 3 x fc 400 ReLU, a logit."""
    H = 1000001

    def __init__(s):
        super().__init__()
        # sparse gradients (SparseAdam) are PyTorch's own best way for a
        # table this size: dense Adam would update all 9M values every step
        s.emb = torch.nn.Embedding(s.H, 9, sparse=True)
        layers, width = [], 26 * 9 + 13
        for _ in range(3):
            layers += [torch.nn.Linear(width, 400), torch.nn.ReLU()]
            width = 400
        s.mlp = torch.nn.Sequential(*layers, torch.nn.Linear(400, 1))
        # paddle's initialisation: xavier uniform (the table's fan: its rows
        # and width), zero biases
        torch.nn.init.xavier_uniform_(s.emb.weight)
        for m in s.mlp:
            if isinstance(m, torch.nn.Linear):
                torch.nn.init.xavier_uniform_(m.weight)
                torch.nn.init.zeros_(m.bias)

    def forward(s, ids, dense):
        return s.mlp(torch.cat([s.emb(ids).view(ids.shape[0], -1), dense], 1))


def ctr():
    model = CtrDnn()
    opt_sparse = torch.optim.SparseAdam(list(model.emb.parameters()), lr=0.001)
    opt_dense = torch.optim.Adam(list(model.mlp.parameters()), lr=0.001)
    lossf = torch.nn.BCEWithLogitsLoss()
    B = 512
    batches = [(torch.randint(0, CtrDnn.H, (B, 26)), torch.rand(B, 13) * 3,
                torch.randint(0, 2, (B, 1)).float()) for _ in range(60)]

    def step(ids, dense, y):
        opt_sparse.zero_grad()
        opt_dense.zero_grad()
        lossf(model(ids, dense), y).backward()
        opt_sparse.step()
        opt_dense.step()
    return timed(step, batches)


def criteo_chunk(rows):
    """(labels, log1p dense values, unfolded 64-bit ids) of parsed lines."""
    y = np.array([float(r[0]) for r in rows], dtype=np.float32).reshape(-1, 1)
    ints = np.array([[float(v) if v else 0.0 for v in r[1:14]] for r in rows])
    dense = np.log1p(np.maximum(ints, 0)).astype(np.float32)
    ids = np.zeros((len(rows), 26), dtype=np.uint64)
    for k in range(26):
        col = np.array([int(r[14 + k], 16) if r[14 + k] else 0 for r in rows], dtype=np.uint64)
        present = np.array([1 if r[14 + k] else 0 for r in rows], dtype=np.uint64)
        ids[:, k] = (np.uint64(k + 1) << np.uint64(33)) | (present << np.uint64(32)) | col
    return y, dense, ids


def criteo_features(path):
    """A Criteo-format file as paddle's reader sees it with hash_space
    1000001: log1p of the clipped integers (missing: 0) and each categorical
    value's id ((column + 1) << 33 | present << 32 | value) folded by the
    same splitmix64 finaliser into [0, H). Read 100,000 lines at a time
    (millions of lines as Python lists would take many GB)."""
    parts, rows = [], []
    with open(path) as f:
        for line in f:
            rows.append(line.rstrip("\n").split("\t"))
            if len(rows) == 100000:
                parts.append(criteo_chunk(rows))
                rows = []
    if rows:
        parts.append(criteo_chunk(rows))
    y = np.concatenate([p[0] for p in parts])
    dense = np.concatenate([p[1] for p in parts])
    ids = np.concatenate([p[2] for p in parts])
    with np.errstate(over="ignore"):
        z = ids + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    folded = (z % np.uint64(CtrDnn.H)).astype(np.int64)
    return torch.from_numpy(folded), torch.from_numpy(dense), torch.from_numpy(y)


def exact_auc(score, label):
    """Area under the ROC curve, ties counted half (ranks averaged)."""
    order = np.argsort(score, kind="mergesort")
    s = score[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1
        i = j + 1
    pos = label > 0.5
    npos, nneg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - npos * (npos + 1) / 2.0) / (npos * nneg)


def ctr_auc(train, test, passes):
    model = CtrDnn()
    opt_sparse = torch.optim.SparseAdam(list(model.emb.parameters()), lr=0.001)
    opt_dense = torch.optim.Adam(list(model.mlp.parameters()), lr=0.001)
    lossf = torch.nn.BCEWithLogitsLoss()
    ids, dense, y = criteo_features(train)
    tids, tdense, ty = criteo_features(test)
    B = 512
    for p in range(passes):
        t0 = time.time()
        perm = torch.randperm(len(y))
        for i in range(0, len(y), B):
            b = perm[i:i + B]
            opt_sparse.zero_grad()
            opt_dense.zero_grad()
            lossf(model(ids[b], dense[b]), y[b]).backward()
            opt_sparse.step()
            opt_dense.step()
        with torch.no_grad():
            score = model(tids, tdense).numpy().ravel()
        print("pass %d done: %d samples in %.1f s, test auc %.4f" %
              (p, len(y), time.time() - t0, exact_auc(score, ty.numpy().ravel())), flush=True)


def loaded_blas():
    """The BLAS shared library mapped into this process, its real path."""
    a = torch.randn(64, 64)
    (a @ a).sum().item()
    found = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            name = os.path.basename(path)
            if name.startswith(("libblas", "libopenblas", "libmkl", "libblis")):
                found.add(os.path.realpath(path))
    return " ".join(sorted(found)) or "none"


if __name__ == "__main__":
    which = sys.argv[1]
    if which == "ctr_auc":
        ctr_auc(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        sys.exit(0)
    if which == "blas":
        print(loaded_blas())
        sys.exit(0)
    r = fit_a_line(sys.argv[2]) if which == "fit_a_line" else mlp() if which == "mlp" else \
        ctr() if which == "ctr" else rec()
    print("%s %.0f" % (which, r))
