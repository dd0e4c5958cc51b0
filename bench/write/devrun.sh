set -e
d=/var/tmp/mk; rm -rf $d; mkdir -p $d/plain $d/mnt
bin/kvfs init $d/store >/dev/null
bin/kvfs mount --foreground --log-level debug $d/store $d/mnt > $d/log 2>&1 & p=$!
for i in $(seq 50); do mountpoint -q $d/mnt && break; sleep 0.1; done
for round in 1 2; do
  sync; bin/gpubench/mkkv -tokens 32768 $d/plain/a.mlxkv | grep -o '"Seconds":[0-9.]*' | sed "s/^/plain $round /"
  rm -f $d/plain/a.mlxkv; sync
  bin/gpubench/mkkv -tokens 32768 $d/mnt/a.mlxkv | grep -o '"Seconds":[0-9.]*' | sed "s/^/kvfs $round /"
done
grep -E "msg=(committed|ingested)" $d/log | sed -e 's/^time=[^ ]* //' | cut -c1-300
bin/kvfs unmount $d/mnt; wait $p || true
