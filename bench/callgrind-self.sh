# Sourced by the callgrind-*.sh scripts: callgrind_self FILE prints the
# self cost of each function in a callgrind output with its cache model,
# one line a function: name, instructions, D1 misses (reads + writes),
# tab-separated; the totals as "PROGRAM TOTALS".
callgrind_self() {
  callgrind_annotate --show-percs=no "$1" 2>/dev/null |
    awk '/^-- Auto-annotated source/ {done = 1}
         !done && NF >= 10 && $1 ~ /^[0-9,]+$/ {
           name = $10; for (i = 11; i <= NF && $i !~ /^\[/; i++) name = name " " $i
           for (i = 1; i <= 9; i++) gsub(",", "", $i)
           print name "\t" $1 "\t" $5 + $6 }'
}
