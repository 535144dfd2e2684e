# cli.sh - the command line: version, help, usage errors, the static binary,
# and `paddle check` on every shipped recipe.
. "$ROOT/tests/integration/lib.sh"

# has NAME TEXT: pass when $out holds TEXT, else fail with the output
has() {
    if [[ "$out" == *"$2"* ]]; then pass "$1"; else fail "$1" "output lacks '$2': $out"; fi
}

run_capture "$PADDLE" version
if [ "$rc" -eq 0 ]; then pass version-exit; else fail version-exit "exit $rc: $out"; fi
has version-paddle "paddle "
has version-lua "  lua      Lua 5.4"
has version-libssh2 "  libssh2  1."
has version-crypto "  crypto   "
has version-blas "  blas     OpenBLAS"
has version-cuda-not-built "  cuda     not in this build (make cuda builds paddle-cuda)"

run_capture "$PADDLE" --version
if [ "$rc" -eq 0 ] && [[ "$out" == *"  lua      Lua 5.4"* ]]; then pass version-flag; else fail version-flag "exit $rc: $out"; fi

expect_error version-extra-argument 2 "paddle version: unexpected argument 'now'" "$PADDLE" version now

run_capture "$PADDLE" help
if [ "$rc" -eq 0 ] && [[ "$out" == *"usage: paddle <command>"* ]] && [[ "$out" == *"  check "* ]] &&
    [[ "$out" == *"  version "* ]] && [[ "$out" == *"  help "* ]]; then
    pass help
else
    fail help "exit $rc: $out"
fi

run_capture "$PADDLE" help --help
if [ "$rc" -eq 0 ] && [[ "$out" == *"usage: paddle <command>"* ]]; then pass help-help; else fail help-help "exit $rc: $out"; fi

run_capture "$PADDLE" help check
if [ "$rc" -eq 0 ] && [[ "$out" == *"usage: paddle check RECIPE"* ]] && [[ "$out" == *"--key=value"* ]]; then
    pass help-check
else
    fail help-check "exit $rc: $out"
fi

run_capture "$PADDLE" help frobnicate
if [ "$rc" -eq 2 ] && [[ "$out" == *"paddle help: unknown command 'frobnicate'"* ]]; then
    pass help-unknown-command
else
    fail help-unknown-command "exit $rc: $out"
fi

# no command: the usage on stdout, exit 2
run_capture "$PADDLE"
if [ "$rc" -eq 2 ] && [[ "$out" == *"usage: paddle <command>"* ]]; then pass no-command; else fail no-command "exit $rc: $out"; fi

run_capture "$PADDLE" frobnicate recipe.lua
if [ "$rc" -eq 2 ] && [[ "$out" == *"paddle: unknown command 'frobnicate'"* ]] && [[ "$out" == *"commands:"* ]]; then
    pass unknown-command
else
    fail unknown-command "exit $rc: $out"
fi

# usage errors name the argument and point at the help
run_capture "$PADDLE" check --bogus x.lua
if [ "$rc" -eq 2 ] && [[ "$out" == *"paddle check: unknown option '--bogus'"* ]] &&
    [[ "$out" == *"'paddle help check' shows the usage."* ]]; then
    pass unknown-flag
else
    fail unknown-flag "exit $rc: $out"
fi

# an option's empty value is no value (--init_model= would read the model
# from /), whether after '=' or as the next argument
# (name|command|option|what it says), each in both forms
for c in "empty-option-value|train|--init_model|--init_model needs a value" \
         "empty-cluster|run|--cluster|--cluster needs a file"; do
    IFS='|' read -r name cmd opt said <<<"$c"
    for form in "$opt=" "$opt ''"; do
        eval "run_capture \"\$PADDLE\" $cmd recipes/none.lua $form"
        if [ "$rc" -eq 2 ] && [[ "$out" == *"paddle $cmd: $said"* ]]; then
            pass "$name $form"
        else
            fail "$name $form" "exit $rc: $out"
        fi
    done
done
run_capture "$PADDLE" help run
if [ "$rc" -eq 0 ] && [[ "$out" == *"[--accept-new-host-keys]"* ]] && [[ "$out" == *"records the key of a host"* ]]; then
    pass help-run-names-host-keys
else
    fail help-run-names-host-keys "exit $rc: $out"
fi

# a typo of the command's own option is named with it, a value after it or
# not; one far from every option gets no guess
run_capture "$PADDLE" run recipes/none.lua --resum
if [ "$rc" -eq 2 ] && [[ "$out" == *"paddle run: unknown option '--resum' (did you mean '--resume'?)"* ]]; then
    pass option-typo-flag
else
    fail option-typo-flag "exit $rc: $out"
fi
run_capture "$PADDLE" predict recipes/none.lua --model m --ouput x.csv
if [ "$rc" -eq 2 ] && [[ "$out" == *"paddle predict: unknown option '--ouput' (did you mean '--output'?)"* ]]; then
    pass option-typo-with-value
else
    fail option-typo-with-value "exit $rc: $out"
fi
# an option of another command is named as such; an option where a value
# belongs is not taken for the value
while IFS='|' read -r name want args; do
    run_capture "$PADDLE" $args
    if [ "$rc" -eq 2 ] && [[ "$out" == *"$want"* ]]; then pass "$name"; else fail "$name" "exit $rc: $out"; fi
done <<'CASES'
run-model-option|paddle run: --model is an option of paddle predict, not of paddle run (a model to start from: --init_model)|run fit_a_line.lua --model output/best
check-init-model-option|paddle check: --init_model is an option of paddle train, paddle run and paddle start, not of paddle check|check fit_a_line.lua --init_model=output/pass-00001
one-dash-option|paddle train: unknown option '-passes=2' (an option begins with two dashes: --passes=2)|train -passes=2 fit_a_line.lua
one-dash-option-last|paddle run: unknown option '-passes=2' (an option begins with two dashes: --passes=2)|run fit_a_line.lua -passes=2
predict-value-is-option|paddle predict: --model needs a value, not the option '--input' (a value that begins with -- goes after '=': --model=VALUE)|predict fit_a_line.lua --model --input x.csv
CASES
run_capture "$PADDLE" run recipes/none.lua --zzzzzz
if [ "$rc" -eq 2 ] && [[ "$out" != *"did you mean"* ]]; then pass option-far-no-guess; else fail option-far-no-guess "exit $rc: $out"; fi

# COMMAND --help (or -h), wherever it stands: that command's help, exit 0
for c in run gen version check; do
    run_capture "$PADDLE" $c recipes/none.lua --help
    if [ "$rc" -eq 0 ] && [[ "$out" == *"usage: paddle $c"* ]]; then pass help-flag-$c; else fail help-flag-$c "exit $rc: $out"; fi
done
run_capture "$PADDLE" train -h
if [ "$rc" -eq 0 ] && [[ "$out" == *"usage: paddle train RECIPE"* ]]; then pass help-flag-short; else fail help-flag-short "exit $rc: $out"; fi

# a recipe setting given with a space instead of '=': the fix is named
run_capture "$PADDLE" check x.lua --passes 5
if [ "$rc" -eq 2 ] && [[ "$out" == *"a recipe setting takes its value after '=': --passes=5"* ]]; then
    pass setting-without-equals
else
    fail setting-without-equals "exit $rc: $out"
fi
# a recipe setting without its value is named as one, with the form of
# the value; an option that is no setting stays unknown
while IFS='|' read -r name want args; do
    run_capture "$PADDLE" $args
    if [ "$rc" -eq 2 ] && [[ "$out" == *"$want"* ]]; then pass "$name"; else fail "$name" "exit $rc: $out"; fi
done <<'CASES'
setting-no-value|paddle check: option --passes needs a value: --passes=N|check x.lua --passes
setting-no-value-before|paddle run: option --batch_size needs a value: --batch_size=N|run --batch_size x.lua
setting-no-value-bool|paddle train: option --header needs a value: --header=true|train x.lua --header --passes=2
not-a-setting-no-value|paddle check: unknown option '--nothing' (a recipe setting takes a value: --NAME=VALUE)|check x.lua --nothing
CASES
run_capture "$PADDLE" check x.lua --mode
if [ "$rc" -eq 2 ] && [[ "$out" == *"paddle check: option --mode needs a value: --mode=sync|async"* ]]; then
    pass setting-no-value-enum
else fail setting-no-value-enum "exit $rc: $out"; fi

run_capture "$PADDLE" check
if [ "$rc" -eq 2 ] && [[ "$out" == *"paddle check: missing argument"* ]]; then pass check-no-recipe; else fail check-no-recipe "exit $rc: $out"; fi

run_capture "$PADDLE" check a.lua b.lua
if [ "$rc" -eq 2 ] && [[ "$out" == *"paddle check: unexpected argument 'b.lua'"* ]]; then
    pass check-two-recipes
else
    fail check-two-recipes "exit $rc: $out"
fi

run_capture "$PADDLE" check a.lua --cluster
if [ "$rc" -eq 2 ] && [[ "$out" == *"paddle check: --cluster needs a file"* ]]; then
    pass cluster-needs-file
else
    fail cluster-needs-file "exit $rc: $out"
fi

expect_error check-missing-recipe 2 "paddle: cannot open nothere.lua" "$PADDLE" check nothere.lua

# the release binary is static; the sanitizer build is not
if [[ "$PADDLE" == *-asan ]]; then
    skip static-binary "the sanitizer build is dynamic by design; the release binary is checked"
elif ! command -v file >/dev/null; then
    fail static-binary "the 'file' command is missing"
else
    run_capture file -L "$PADDLE"
    if [[ "$out" == *"statically linked"* ]]; then pass static-binary; else fail static-binary "$out"; fi
fi

# every shipped recipe checks
n=0
for r in "$ROOT"/recipes/*.lua; do
    [ -e "$r" ] || continue
    n=$((n + 1))
    name=recipe-$(basename "$r" .lua)
    run_capture "$PADDLE" check "$r"
    last=$(printf '%s\n' "$out" | tail -n 1)
    # the data of some is made by recipes/prepare.sh or paddle gen: named when absent
    if [ "$rc" -eq 0 ] && { [ "$last" = ok ] || { [ "$last" = "ok, but the data is not all here" ] &&
        [[ "$out" == *"part not read: "*"cannot open "*"paddle train and run would stop there"* ]]; }; }; then
        pass "$name"
    else
        fail "$name" "exit $rc: $out"
    fi
done
if [ "$n" -gt 0 ]; then pass shipped-recipes-found; else fail shipped-recipes-found "no recipes in $ROOT/recipes"; fi

# check reads a first batch of the data, as train would: a model the data
# does not fit, or data the model does not fit, fails check as it would fail
# train; data that is not here is named
mkdir -p cdata
printf '1,2,3,4\n5,6,7,8\n' >cdata/four.csv
cat >cols.lua <<'R'
data { train = "cdata/four.csv", format = "csv", columns = { "x=1-3", "y=5" } }
model = function(nn) return nn.square_error_cost(nn.fc(nn.data("x", 3), 1), nn.data("y", 1)) end
optimizer = nn.sgd { learning_rate = 0.01 }
R
expect_error check-data-columns 2 "cdata/four.csv:1: 4 fields, the model reads 5" "$PADDLE" check cols.lua
sed 's/"y=5"/"y=4"/' cols.lua >cols_ok.lua
run_capture "$PADDLE" check cols_ok.lua
if [ "$rc" -eq 0 ] && [[ "$out" == *"data     train part: a first batch read"* ]] && [ "$(tail -n 1 <<<"$out")" = ok ]; then
    pass check-data-read
else
    fail check-data-read "exit $rc: $out"
fi
sed 's|cdata/four.csv|cdata/none.csv|' cols_ok.lua >missing.lua
run_capture "$PADDLE" check missing.lua
if [ "$rc" -eq 0 ] && [[ "$out" == *"train part not read: missing.lua:1: data.train: cannot open data file cdata/none.csv"* ]] &&
   [ "$(tail -n 1 <<<"$out")" = "ok, but the data is not all here" ]; then
    pass check-data-missing-named
else
    fail check-data-missing-named "exit $rc: $out"
fi
expect_error train-data-option-named 1 "paddle: option --train: cannot open data file cdata/none.csv" \
    "$PADDLE" train cols_ok.lua --train=cdata/none.csv
# a line that does not parse is a mistake in what train was given (exit 2),
# named by file and line, with the setting that would skip it
printf '1,2,3,4\n5,6,x,8\n' >cdata/bad.csv
sed 's|cdata/four.csv|cdata/bad.csv|' cols_ok.lua >badline.lua
bad_said="paddle: badline.lua:1: data.train: cdata/bad.csv:2: field 3 is not a decimal number: 'x' (data.on_error = \"skip\" would skip such lines)"
run_capture "$PADDLE" train badline.lua --save_dir=badline_out
if [ "$rc" -eq 2 ] && [ "$(tail -n 1 <<<"$out")" = "$bad_said" ]; then pass train-malformed-line
else fail train-malformed-line "exit $rc: $out"; fi
expect_error check-malformed-line 2 "$bad_said" "$PADDLE" check badline.lua
# a first line of names is said to be maybe a header; an empty data.train
# is refused where it was set
printf 'a,b,c,d\n1,2,3,4\n' >cdata/hdr.csv
sed 's|cdata/four.csv|cdata/hdr.csv|' cols_ok.lua >hdr.lua
expect_error check-header-hint 2 "paddle: hdr.lua:1: data.train: cdata/hdr.csv:1: field 1 is not a decimal number: 'a' (a header line? data.header = true skips it)" \
    "$PADDLE" check hdr.lua
# fields cut by another separator are said to be so; a UTF-8 byte-order
# mark before the first field is no part of it
printf '1;2;3;4\n5;6;7;8\n' >cdata/semi.csv
sed 's|cdata/four.csv|cdata/semi.csv|' cols_ok.lua >semi.lua
expect_error check-separator-hint 2 "paddle: semi.lua:1: data.train: cdata/semi.csv:1: field 1 is not a decimal number: '1;2;3;4' (the line has ';' but data.separator is \",\"? data.separator = \";\" reads it)" \
    "$PADDLE" check semi.lua
# so are fields cut by ',' where data.separator is another, and by blanks
expect_error check-separator-comma 2 "paddle: cols_ok.lua:1: data.train: cdata/four.csv:1: field 1 is not a decimal number: '1,2,3,4' (the line has ',' but data.separator is \";\"? data.separator = \",\" reads it)" \
    "$PADDLE" check cols_ok.lua --separator=';'
printf '1 2 3 4\n' >cdata/blanks.csv
expect_error check-separator-space 2 "cdata/blanks.csv:1: field 1 is not a decimal number: '1 2 3 4' (the line has a space but data.separator is \",\"? data.separator = \" \" reads it)" \
    "$PADDLE" check cols_ok.lua --train=cdata/blanks.csv
# a field that starts as a number is quoted whole, cut at 31 bytes, its
# control characters escaped; a first line of numbers is not a header
printf '1,2,1.5e,4\n' >cdata/exp.csv
expect_error check-field-quoted 2 "cdata/exp.csv:1: field 3 is not a decimal number: '1.5e'" \
    "$PADDLE" check cols_ok.lua --train=cdata/exp.csv
run_capture "$PADDLE" check cols_ok.lua --train=cdata/exp.csv
if [[ "$out" != *"header"* ]]; then pass check-numbers-no-header-hint; else fail check-numbers-no-header-hint "$out"; fi
printf '1,2,3,4\n1,2\x01%s,3,4\n' aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa >cdata/long.csv
expect_error check-field-cut 2 "cdata/long.csv:2: field 2 is not a decimal number: '2\\1aaaaaaaaaaaaaaaaaaaaaaaaaaaaa...'" \
    "$PADDLE" check cols_ok.lua --train=cdata/long.csv
printf '\xef\xbb\xbf1,2,3,4\n5,6,7,8\n' >cdata/bom.csv
sed 's|cdata/four.csv|cdata/bom.csv|' cols_ok.lua >bom.lua
run_capture "$PADDLE" train bom.lua --save_dir=bom_out
if [ "$rc" -eq 0 ] && [ -f bom_out/pass-00000/manifest.json ]; then pass train-byte-order-mark
else fail train-byte-order-mark "exit $rc: $out"; fi
# more fields than the model reads, no data.columns: trained, and said
# once, naming the first such line
printf 'data { train = "cdata/five.csv" }\nmodel = function(nn)\n  return nn.square_error_cost(nn.fc(nn.data("x", 2), 1), nn.data("y", 1))\nend\noptimizer = nn.sgd { learning_rate = 0.01 }\nsettings { passes = 2 }\n' >extra.lua
printf '1,2,3\n1,2,3,4,5\n2,3,4,5,6\n' >cdata/five.csv
run_capture "$PADDLE" train extra.lua --save_dir=extra_out
said="cdata/five.csv:2: 5 fields, the model reads the first 3 and ignores the rest (data.columns chooses which columns feed which data layer)"
if [ "$rc" -eq 0 ] && [ -f extra_out/pass-00001/manifest.json ] && [ "$(grep -cF "$said" <<<"$out")" -eq 1 ]; then
    pass train-extra-fields-said-once
else fail train-extra-fields-said-once "exit $rc: $out"; fi
# settings of a job across processes on paddle train's command line: said,
# and it trains as without them
# (lua/schema.lua marks them), each once however often it is given
printf 'cluster { hosts = { "127.0.0.2" } }\n' >onehost_cluster.lua
run_capture "$PADDLE" train cols_ok.lua --save_dir=alone_out --pservers=2 --restarts=2 --passes=1 --pservers=3 \
    --heartbeat_timeout=5 --cluster onehost_cluster.lua
said="paddle train: warning: --pservers is a setting of a job across processes (paddle run); paddle train trains in this one process without it"
if [ "$rc" -eq 0 ] && [ -f alone_out/pass-00000/manifest.json ] && [ "$(grep -cF "$said" <<<"$out")" -eq 1 ] &&
   [[ "$out" == *"warning: --restarts is a setting of a job across processes"* ]] &&
   [[ "$out" == *"warning: --heartbeat_timeout is a setting of a job across processes"* ]] &&
   [[ "$out" == *"warning: --cluster is a setting of a job across processes"* ]] && [[ "$out" != *"--passes is a"* ]]; then
    pass train-job-settings-said
else fail train-job-settings-said "exit $rc: $out"; fi
# paddle trainer's --pservers is the pservers' endpoints: a count there (as
# paddle pserver and run take it) is refused at once, not taken as 0.0.0.1
expect_error trainer-pservers-count 2 "paddle trainer: option --pservers: pserver endpoint '1' is a number, not a host (paddle trainer takes the pservers' endpoints: --pservers=HOST:PORT,...)" \
    timeout 20 "$PADDLE" trainer cols_ok.lua --pservers=1 --trainer_id=0
# a recipe whose name begins with a dash and a letter is a recipe where it
# is a file (a workspace path as the launcher passes it to a node)
cp cols_ok.lua ./-dash.lua
run_capture "$PADDLE" check -dash.lua
if [ "$rc" -eq 0 ] && [[ "$out" != *"unknown option"* ]]; then pass dash-named-recipe
else fail dash-named-recipe "exit $rc: $out"; fi
sed 's|"cdata/four.csv"|""|' cols_ok.lua >empty_train.lua
expect_error check-empty-train 2 "paddle: empty_train.lua:1: data.train is empty: it names a data file" \
    "$PADDLE" check empty_train.lua
expect_error train-empty-train-option 2 "paddle: option --train: data.train is empty: it names a data file" \
    "$PADDLE" train cols_ok.lua --train=
# with data.on_error = "skip", data of which no line parses ends the job
# (exit 2) rather than training nothing and saving it
printf '1,2,x,4\n5,6,y,8\n' >cdata/allbad.csv
sed 's|cdata/four.csv|cdata/allbad.csv|' cols_ok.lua >allbad.lua
run_capture "$PADDLE" train allbad.lua --on_error=skip --save_dir=allbad_out
if [ "$rc" -eq 2 ] && [ "$(tail -n 1 <<<"$out")" = 'paddle: allbad.lua:1: data.train: no line could be read: the 2 read were all malformed, and skipped (data.on_error = "skip"; the first are logged above)' ] &&
   [ ! -e allbad_out/pass-00000 ]; then
    pass train-all-lines-skipped
else
    fail train-all-lines-skipped "exit $rc: $out"
fi
# so is an id outside its slot's range
printf '3,1.5\n12,1.5\n' >cdata/ids.csv
cat >ids.lua <<'R'
data { train = "cdata/ids.csv" }
model = function(nn) return nn.square_error_cost(nn.fc(nn.embedding(nn.id("item", 10), 2), 1), nn.data("y", 1)) end
optimizer = nn.sgd { learning_rate = 0.1 }
R
run_capture "$PADDLE" train ids.lua --save_dir=ids_out
if [ "$rc" -eq 2 ] && [ "$(tail -n 1 <<<"$out")" = "paddle: ids.lua:1: data.train: cdata/ids.csv:2: field 1 of slot 'item' must be an id in [0, 10), got 12 (data.on_error = \"skip\" would skip such lines)" ]; then
    pass train-id-out-of-range
else
    fail train-id-out-of-range "exit $rc: $out"
fi
# check shows restarts and checkpoints as the job will use them
run_capture "$PADDLE" check cols_ok.lua --restarts=2 --checkpoint_dir=ck
if [ "$rc" -eq 0 ] && [[ "$out" == *"mode sync, restarts 2 (from the last checkpoint)"* ]] &&
   [[ "$out" == *"device cpu, checkpoints in ck every 200 steps (keep 2)"* ]]; then pass check-shows-restarts
else fail check-shows-restarts "exit $rc: $(head -n 8 <<<"$out")"; fi
# a mistake in a value the command line set names the option, not the recipe
expect_error check-columns-option-named 2 "paddle: option --columns: data.columns says nothing of slot 'y'" \
    "$PADDLE" check cols_ok.lua --columns=x=1-3
# a data file that gives no first batch (a FIFO no one writes to; a network
# filesystem that hangs) is named after 10 s as what check waits for
mkfifo cdata/fifo.csv
sed 's|cdata/four.csv|cdata/fifo.csv|' cols_ok.lua >fifo.lua
run_capture timeout 13 "$PADDLE" check fifo.lua
if [ "$rc" -eq 124 ] && [[ "$out" == *"paddle: still reading the first batch of cdata/fifo.csv after 10 s (a FIFO no one writes to, or a filesystem that does not answer?): Ctrl+C stops"* ]]; then
    pass check-data-that-never-comes
else
    fail check-data-that-never-comes "exit $rc: $out"
fi
# where the passes go is checked as training starts, not at the first pass's end
touch afile
expect_error train-save-dir-a-file 2 "paddle: settings.save_dir = afile/out: Not a directory" \
    "$PADDLE" train cols_ok.lua --save_dir=afile/out
expect_error train-device-not-built 2 "device 'cuda' asked for, but this paddle has no CUDA backend" \
    "$PADDLE" train cols_ok.lua --device=cuda
cat >uci12.lua <<'R'
data { train = "cdata/none.data", format = "uci_housing" }
model = function(nn)
  local x = nn.data("x", 12)
  return nn.square_error_cost(nn.fc(x, 1), nn.data("y", 1))
end
optimizer = nn.sgd { learning_rate = 0.01 }
R
expect_error check-uci-shape-at-its-line 2 "uci12.lua:3: uci_housing gives 13 features and 1 price" "$PADDLE" check uci12.lua

# checking a model allocates none of it: a 10M x 32 table (1.3 GB of floats)
# checks within 300 MB of address space
cat >big.lua <<'R'
data { train = "x.csv", format = "csv" }
model = function(nn)
  local id, y = nn.id("item", 10000000), nn.data("y", 1)
  return nn.square_error_cost(nn.fc(nn.embedding(id, 32), 1), y)
end
optimizer = nn.sgd { learning_rate = 0.1 }
R
if [[ "$PADDLE" == *-asan ]]; then
    skip check-allocates-nothing "ASan reserves terabytes of address space: an address-space limit cannot tell here"
else
    run_capture bash -c "ulimit -v 300000 && exec \"\$0\" check big.lua" "$PADDLE"
    if [ "$rc" -eq 0 ] && [[ "$out" == *"embedding_0.w_0 [10000000, 32] sparse 320000000"* ]]; then
        pass check-allocates-nothing
    else
        fail check-allocates-nothing "exit $rc: $(tail -n 3 <<<"$out")"
    fi
fi

# `paddle check` sizes the job; figures worked out by hand:
# parameters: fc_0.w_0 [6, 3] + fc_0.b_0 [1, 3] + embedding_0.w_0 [5, 2] = 31 floats = 124 B; adam: 2 x 124 B.
# pservers: block 0 (fc_0.w_0, 72 B) on 0, block 1 (fc_0.b_0, 12 B) on 1; table rows 0, 2, 4 (24 B) on 0,
# 1 and 3 (16 B) on 1; each float with its gradient and 2 adam copies: x4 = 384 B and 112 B.
# activations at batch 10: x 10*4*4 = 160, u and y 40 each (ids), embedding 10*2*4*2 = 160,
# concat 10*6*4*2 = 480, fc 10*3*4*2 = 240, cost 10*1*4*2 = 80: 1200 B = 1.2 KiB;
# one process: 124 * 4 + 1200 = 1696 B = 1.7 KiB.
cat >sizes.lua <<'R'
job { pservers = 2, trainers = 1 }
data { train = "t.csv", format = "csv" }
model = function(nn)
  local x, u, y = nn.data("x", 4), nn.id("u", 5), nn.id("y", 3)
  local p = nn.fc(nn.concat { x, nn.embedding(u, 2) }, 3, { act = "softmax" })
  return nn.cross_entropy(p, y)
end
optimizer = nn.adam {}
settings { batch_size = 10 }
R
run_capture "$PADDLE" check sizes.lua
has check-size-params "memory   parameters 124 B, gradients 124 B, adam state 248 B (2 copies)"
has check-size-pserver0 "  pserver 0  1 dense block 72 B, 3 table rows 24 B; with gradients and optimizer state 384 B"
has check-size-pserver1 "  pserver 1  1 dense block 12 B, 2 table rows 16 B; with gradients and optimizer state 112 B"
has check-size-table "  tables     a row of embedding_0.w_0 8 B (x4 with its gradient and optimizer state)"
has check-size-trainer "  trainer    parameters and gradients 248 B, activations 1.2 KiB at batch 10"
has check-size-local "  train      one process (paddle train): 1.7 KiB"
run_capture "$PADDLE" check sizes.lua --batch_size=1000
has check-size-batch "activations 117.2 KiB at batch 1000"
sed 's/nn.adam {}/nn.momentum {}/' sizes.lua >momentum.lua
run_capture "$PADDLE" check momentum.lua
has check-size-momentum "momentum state 124 B (1 copy)"

# a 10M x 32 table (1.2 GiB, 4.8 GiB with adam) checks in little memory: nothing is allocated
cat >big.lua <<'R'
data { train = "t.csv", format = "csv" }
model = function(nn)
  local u, y = nn.id("u", 10000000), nn.data("y", 1)
  return nn.square_error_cost(nn.fc(nn.embedding(u, 32), 1), y)
end
optimizer = nn.adam {}
R
out=$(ulimit -v 800000; "$PADDLE" check big.lua 2>&1)
rc=$?
if [[ "$PADDLE" == *-asan ]]; then
    skip check-size-no-allocation "AddressSanitizer reserves its shadow memory beyond any ulimit -v"
elif [ "$rc" -eq 0 ] && [[ "$out" == *"memory   parameters 1.2 GiB, gradients 1.2 GiB, adam state 2.4 GiB"* ]]; then
    pass check-size-no-allocation
else
    fail check-size-no-allocation "rc $rc under ulimit -v 800000: $(tail -n 3 <<<"$out")"
fi
