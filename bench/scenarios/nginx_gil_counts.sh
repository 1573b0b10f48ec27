#!/bin/bash
# Kernel counts per request of a thread-mode backend behind nginx (one worker, a new backend
# connection per request) at wrk -c16: futex calls, all syscalls, context switches (perf stat on
# the server's threads, no strace), first receives, accepts and epoll_waits; and the CPU time
# per request of the server (and its user part) and of the nginx worker, with the share of a core each used (a
# server below a full core while requests wait is waiting, not computing). The req/s and p99
# wrk prints are one run's, not a measurement on a shared machine: compare trees by turns.
# bench/profile-new-connection.md sections 5 and 7.
#   bench/scenarios/nginx_gil_counts.sh TREE fcgi|scgi|uwsgi LABEL   (LABEL uwsgi: uWSGI 1x16)
#   POOL="--min-spare 1 --max-spare 2 --max-threads 2" before it: flupfast's pool (default
#   4/16/64, bench/profile-new-connection.md section 1)
set -u
TREE=$1; PROTO=$2; LABEL=$3
D=${TMPDIR:-/tmp}/nginx-gil-counts/$LABEL-$PROTO; rm -rf $D; mkdir -p $D
PORT=$(cd $TREE && python -c "from bench.base import free_port; print(free_port())")
SOCK=$D/b.sock
case $PROTO in
 fcgi) LOC="include /etc/nginx/fastcgi_params; fastcgi_param SCRIPT_NAME \"\"; fastcgi_param PATH_INFO \$uri; fastcgi_pass unix:$SOCK; fastcgi_keep_conn off;";;
 scgi) LOC="include /etc/nginx/scgi_params; scgi_param SCRIPT_NAME \"\"; scgi_param PATH_INFO \$uri; scgi_pass unix:$SOCK;";;
 uwsgi) LOC="include /etc/nginx/uwsgi_params; uwsgi_param SCRIPT_NAME \"\"; uwsgi_param PATH_INFO \$uri; uwsgi_pass unix:$SOCK;";;
esac
cat > $D/nginx.conf <<EOC
user $(id -un);
worker_processes 1;
daemon off;
pid $D/nginx.pid;
error_log $D/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $D; fastcgi_temp_path $D; scgi_temp_path $D; uwsgi_temp_path $D; proxy_temp_path $D;
  server { listen 127.0.0.1:$PORT; location / { $LOC } }
}
EOC
cd $TREE
if [ "$LABEL" = uwsgi ]; then
  case $PROTO in fcgi) F=--fastcgi-socket;; scgi) F=--scgi-socket;; uwsgi) F=--uwsgi-socket;; esac
  UWSGI=$(cd $TREE && python -c "from bench.servers.uwsgi import find_uwsgi; print(find_uwsgi())")
  $UWSGI --die-on-term --need-app --disable-logging $F $SOCK --module bench.apps:hello --processes 1 --threads 16 > $D/server.log 2>&1 &
else
python -m flupfast --protocol $PROTO --mode thread --bind unix:$SOCK ${POOL:---min-spare 4 --max-spare 16 --max-threads 64} --log-level warning bench.apps:hello > $D/server.log 2>&1 &
fi
SPID=$!
/usr/sbin/nginx -c $D/nginx.conf -p $D > $D/nginx.out 2>&1 &
NPID=$!
sleep 1.5
NW=$(pgrep -P $NPID | head -1)  # the nginx worker
# utime+stime: the fields after the command's closing parenthesis (flupfast's process title
# has spaces in it, which shift awk's fields when counted from the start of the line)
cpu_ticks() { sed 's/.*) //' /proc/$1/stat | awk '{print $12+$13}'; }
wrk -t1 -c16 -d2 http://127.0.0.1:$PORT/ > /dev/null 2>&1   # warm-up
sleep 0.5
read V0 I0 < <(cat /proc/$SPID/task/*/status | awk '/^voluntary_ctxt/{v+=$2}/^nonvoluntary_ctxt/{i+=$2}END{print v,i}')
perf stat -x , -o $D/perf.txt -e syscalls:sys_enter_futex,raw_syscalls:sys_enter,context-switches,syscalls:sys_enter_recvfrom,syscalls:sys_enter_accept4,syscalls:sys_enter_epoll_wait -p $SPID &
PP=$!
sleep 0.5
machine() { awk '/^cpu /{print $5+$6, $9}' /proc/stat; }  # idle+iowait, steal
user_ticks() { sed 's/.*) //' /proc/$1/stat | awk '{print $12}'; }
C0="$(cpu_ticks $SPID) $(user_ticks $SPID) $(cpu_ticks $NW) $(date +%s.%N) $(machine)"
wrk -t1 -c16 -d3 --latency http://127.0.0.1:$PORT/ > $D/wrk.txt 2>&1
C1="$(cpu_ticks $SPID) $(user_ticks $SPID) $(cpu_ticks $NW) $(date +%s.%N) $(machine)"
kill -INT $PP; wait $PP
read V1 I1 < <(cat /proc/$SPID/task/*/status | awk '/^voluntary_ctxt/{v+=$2}/^nonvoluntary_ctxt/{i+=$2}END{print v,i}')
N=$(grep -o '[0-9]* requests in' $D/wrk.txt | awk '{print $1}')
NT=$(ls /proc/$SPID/task | wc -l)
kill $NPID $SPID; wait $NPID $SPID 2>/dev/null
ERR=$(grep -c "Non-2xx\|Socket errors" $D/wrk.txt)
P99=$(awk '$1 == "99%" {print $2}' $D/wrk.txt)
python3 - "$D/perf.txt" $N $V0 $I0 $V1 $I1 $LABEL $PROTO $NT $ERR "$C0" "$C1" "$P99" <<'EOP'
import os
import sys
p,n,v0,i0,v1,i1,label,proto,nt,err,c0,c1,p99=sys.argv[1:]
(s0, u0, w0, t0, id0, st0), (s1, u1, w1, t1, id1, st1) = [[float(x) for x in c.split()] for c in (c0, c1)]
tick, secs = os.sysconf('SC_CLK_TCK'), t1 - t0
n=int(n); c={}
for l in open(p):
    f=l.strip().split(',')
    if len(f)>=3 and f[0].isdigit(): c[f[2].split(':')[-1]]=int(f[0])
print("%s %s n=%d threads=%s wrkerr=%s futex/req=%.2f syscalls/req=%.2f cs/req=%.2f vol/req=%.2f invol/req=%.2f recv=%.2f accept=%.2f epoll_wait=%.2f" % (label, proto, n, nt, err, c.get('sys_enter_futex',0)/n, c.get('sys_enter',0)/n, c.get('context-switches',0)/n, (int(v1)-int(v0))/n, (int(i1)-int(i0))/n, c.get('sys_enter_recvfrom',0)/n, c.get('sys_enter_accept4',0)/n, c.get('sys_enter_epoll_wait',0)/n))
print("  req/s=%.0f p99=%s server: %.1f us/req (user %.1f), %.0f%% of a core; nginx worker: %.1f us/req, %.0f%%" % (n/secs, p99, (s1-s0)/tick/n*1e6, (u1-u0)/tick/n*1e6, (s1-s0)/tick/secs*100, (w1-w0)/tick/n*1e6, (w1-w0)/tick/secs*100))
print("  machine: idle %.0f%%, steal %.0f%% of %d cores" % ((id1-id0)/tick/secs*100, (st1-st0)/tick/secs*100, os.cpu_count()))
EOP
