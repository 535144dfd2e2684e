# curves.sh - output/curves.svg: written by `paddle train` and by trainer 0
# of `paddle run`, valid SVG that a real renderer (rsvg-convert) draws into
# a picture that is not blank and shows both curves; curves.tsv holds every
# pass; a recipe with a metric gets its panel.
. "$ROOT/tests/integration/lib.sh"
PY=/usr/bin/python3

"$ROOT/recipes/prepare.sh" || { fail prepare "recipes/prepare.sh failed"; exit 0; }
mkdir -p data/uci_housing && cp "$ROOT/recipes/data/uci_housing/housing.data" data/uci_housing/
cp "$ROOT/recipes/fit_a_line.lua" .

# svg_ok NAME FILE WANT_TEXT... : well-formed XML with an <svg> root, two
# polylines of points (train, test), axis labels and the wanted texts
svg_ok() {
    local name=$1 file=$2; shift 2
    local why
    why=$($PY - "$file" "$@" <<'P'
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception as e:
    print("not well-formed XML: %s" % e); sys.exit()
if root.tag != ns + "svg":
    print("root is %s, not svg" % root.tag); sys.exit()
lines = [p for p in root.iter(ns + "polyline") if len(p.get("points", "").split()) >= 2]
texts = " ".join(t.text or "" for t in root.iter(ns + "text"))
if len(lines) < 2:
    print("%d polylines with points" % len(lines))
for want in ["step", "cost", "train cost", "test cost"] + sys.argv[2:]:
    if want not in texts:
        print("no text '%s' in: %s" % (want, texts[:300])); break
P
)
    if [ -z "$why" ]; then pass "$name"; else fail "$name" "$file: $why"; fi
}

# png_ok NAME FILE : rsvg-convert renders it; the PNG (decoded here with
# zlib) has ink on more than 2% of its pixels, and the train (blue) and
# test (red) colours both appear
png_ok() {
    local name=$1 file=$2 why
    if ! command -v rsvg-convert >/dev/null; then
        skip "$name" "rsvg-convert missing (Debian librsvg2-bin; tests/deps.sh installs it)"
        return
    fi
    if ! rsvg-convert -f png -o "$file.png" "$file" 2>rsvg.err; then
        fail "$name" "rsvg-convert failed: $(cat rsvg.err)"
        return
    fi
    why=$($PY - "$file.png" <<'P'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
if data[:8] != b"\x89PNG\r\n\x1a\n":
    print("not a PNG"); sys.exit()
pos, idat = 8, b""
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if kind == b"IHDR":
        w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
    elif kind == b"IDAT":
        idat += body
    pos += 12 + n
if depth != 8 or ctype not in (2, 6):
    print("unexpected PNG format: depth %d, colour type %d" % (depth, ctype)); sys.exit()
bpp = 4 if ctype == 6 else 3
raw, stride = zlib.decompress(idat), w * bpp
rows, prev, i = [], bytearray(stride), 0
for y in range(h):
    f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
    i += 1 + stride
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b, c = prev[x], prev[x - bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    rows.append(line)
    prev = line
ink = blue = red = 0
for line in rows:
    for x in range(0, stride, bpp):
        r, g, b = line[x], line[x + 1], line[x + 2]
        alpha = line[x + 3] if bpp == 4 else 255
        if alpha > 128 and (r < 200 or g < 200 or b < 200): ink += 1
        if alpha > 128 and b > 150 and r < 80 and g < 160: blue += 1
        if alpha > 128 and r > 180 and g < 80 and b < 80: red += 1
total = w * h
if w < 400 or h < 200: print("picture of %dx%d" % (w, h))
elif ink < total * 0.02: print("blank: %d of %d pixels inked" % (ink, total))
elif blue < 100 or red < 100: print("curves missing: %d blue, %d red pixels" % (blue, red))
else: sys.stderr.write("%dx%d, %.1f%% inked, %d blue, %d red pixels\n" % (w, h, 100.0 * ink / total, blue, red))
P
)
    if [ -z "$why" ]; then pass "$name"; else fail "$name" "$file.png: $why"; fi
}

# paddle train: the demo until early stopping
run_capture "$PADDLE" train fit_a_line.lua
passes=$(grep -c 'pass [0-9]* done' <<<"$out")
if [ "$rc" -ne 0 ] || [ ! -s output/curves.svg ]; then
    fail train_writes "exit $rc, output/: $(ls output 2>&1 | head -5)"
elif ls output/*.partial-* >/dev/null 2>&1; then
    fail train_writes "a partial file was left: $(ls output/*.partial-*)"
elif [ "$(grep -c '^test ' output/curves.tsv)" -ne "$passes" ]; then
    fail train_writes "curves.tsv has $(grep -c '^test ' output/curves.tsv) test points for $passes passes"
else
    pass train_writes
fi
svg_ok train_svg output/curves.svg "fit_a_line.lua"
png_ok train_png output/curves.svg

# paddle run: trainer 0 writes it where it saves models, after every pass
rm -rf output
run_capture "$PADDLE" run fit_a_line.lua --passes=20
if [ "$rc" -ne 0 ] || [ ! -s output/curves.svg ]; then
    fail run_writes "exit $rc: $(tail -n 5 <<<"$out")"
elif [ "$(grep -c '^test ' output/curves.tsv)" -ne 20 ]; then
    fail run_writes "curves.tsv has $(grep -c '^test ' output/curves.tsv) test points for 20 passes"
else
    pass run_writes
fi
svg_ok run_svg output/curves.svg
png_ok run_png output/curves.svg

# a recipe with a test metric (auc): a second panel with the metric's line
"$PADDLE" gen criteo --out data/criteo --rows 4000 >/dev/null 2>&1
cat >ctr.lua <<'R'
data { train = "data/criteo/train.txt", test = "data/criteo/test.txt", format = "criteo", hash_space = 1009 }
model = function(nn)
  local label, dense = nn.data("label", 1), nn.data("dense", 13)
  local function slots(from, to)
    local e = {}
    for k = from, to do e[#e + 1] = nn.embedding(nn.id("C" .. k, 1009), 4, { param = "emb" }) end
    return nn.concat(e)
  end
  local logit = nn.fc(nn.fc(nn.concat { slots(1, 13), slots(14, 26), dense }, 16, "relu"), 1)
  return { cost = nn.sigmoid_cross_entropy(logit, label), predict = logit, metrics = { auc = nn.auc(logit, label) } }
end
optimizer = nn.adam { learning_rate = 0.001 }
settings { batch_size = 64, passes = 3, log_period = 5, save_dir = "ctr_out" }
R
run_capture "$PADDLE" train ctr.lua
if [ "$rc" -ne 0 ] || [ ! -s ctr_out/curves.svg ]; then
    fail metric_panel "exit $rc: $(tail -n 5 <<<"$out")"
else
    svg_ok metric_panel ctr_out/curves.svg "auc" "test metric"
    png_ok metric_png ctr_out/curves.svg
fi
