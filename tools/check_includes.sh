#!/usr/bin/env bash
# check_includes.sh - the layers of src/ depend downwards only:
#
#     core <- backend <- data <- nn <- ps <- launch <- main
#
# with src/lua/ beside ps (it may include core only) and included only by
# src/main.c, the one place that loads recipes. A file may include headers
# of its own layer and of the layers below it. Prints every include that
# points up or sideways and exits 1 if there is one. Run by `make test`.
set -u
cd "$(dirname "$0")/.."

rank() {
    case $1 in
        core) echo 0 ;; backend) echo 1 ;; data) echo 2 ;; nn) echo 3 ;;
        ps | lua) echo 4 ;; launch) echo 5 ;; main) echo 6 ;; *) echo -1 ;;
    esac
}

# the layer of a path under src/ ("main" for src/main.c)
layer() {
    local p=${1#src/}
    case $p in */*) echo "${p%%/*}" ;; *) echo main ;; esac
}

bad=0
files=$(find src -name '*.c' -o -name '*.h' -o -name '*.cu' | sort)
for f in $files; do
    from=$(layer "$f")
    fr=$(rank "$from")
    if [ "$fr" -lt 0 ]; then
        echo "check_includes: $f is in no known layer (add it to tools/check_includes.sh)"
        bad=1
        continue
    fi
    while IFS=: read -r line inc; do
        # resolve the include relative to the including file
        target=$(realpath -m --relative-to=. "$(dirname "$f")/$inc")
        case $target in src/*) ;; *) continue ;; esac
        to=$(layer "$target")
        [ "$to" = "$from" ] && continue
        tr=$(rank "$to")
        why=
        if [ "$to" = lua ] && [ "$from" != main ]; then
            why="only src/main.c may include src/lua/ (the recipe loader)"
        elif [ "$tr" -ge "$fr" ]; then
            why="$from may not include $to (core <- backend <- data <- nn <- ps|lua <- launch <- main)"
        fi
        if [ -n "$why" ]; then
            echo "$f:$line: includes $inc: $why"
            bad=1
        fi
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | sed -E 's/^([0-9]+):[^"]*"([^"]*)".*/\1:\2/')
done
if [ "$bad" -ne 0 ]; then
    echo "check_includes: includes that point up or sideways (see above)"
    exit 1
fi
echo "check_includes: $(echo "$files" | wc -l) files, every include points down"
