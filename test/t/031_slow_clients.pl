# 031_slow_clients: clients that stop reading (docs/ARCHITECTURE.md,
# "Delivery: live, lag and replay").
#
# For each overflow_policy (a fresh node each, so that the memory baseline is
# clean): five clients connect and then never read (their kernel buffers fill
# up), one normal client reads; $N (200, more with larger kernel buffers)
# broadcasts of 64 KiB each are committed one after the other,
# queue_max_events = 16, queue_max_bytes = 256 kB.
#  - the normal client gets every broadcast, in order, promptly (the delay
#    from commit to receipt is measured for each one);
#  - connections() shows each stalled connection with queued_bytes <=
#    queue_max_bytes + one frame and queued_events <= queue_max_events;
#  - the worker's resident memory stays within baseline + 20 MB (see $RSS_BOUND);
#  - the kernel holds at most socket_send_buffer (default 128 kB; Linux
#    doubles it) for each stalled socket (/proc/net/tcp tx_queue), not the
#    4 MB that autotuning would allow;
#  - then the first stalled client reads:
#      lag (the default): it gets every broadcast, in order, once, and no
#        gap notice; nothing was dropped;
#      drop_oldest / drop_newest: it gets pgbus:gap-detected notices, its
#        frames are in order without duplicates, what it got plus what the
#        notices say was dropped is exactly $N, the first notice's "resume"
#        cursor names the last frame it received (or where it started), and
#        a reconnect with it gets every message after it exactly once;
#      disconnect: the server closed it (no gap notice); a reconnect with its
#        last id gets every missed message exactly once.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode qw(parse_token token_le);
use PsqlSession;

$SIG{PIPE} = 'IGNORE';

my $PAYLOAD = 65536;           # bytes of filler in each broadcast
# Broadcasts: 200 (12.5 MiB), or more where the kernel may buffer more for a
# client that does not read (the server's send buffer grows up to tcp_wmem's
# maximum, 4 MiB by default): the stalled queues must overflow.
my $N = 200;
if (open my $fh, '<', '/proc/sys/net/ipv4/tcp_wmem')
{
	my (undef, undef, $wmem_max) = split ' ', scalar <$fh>;
	my $need = int(2 * ($wmem_max + 262144) / $PAYLOAD) + 50;
	$N = $need if $need > $N;
	close $fh;
}
my $QMAX_EVENTS = 16;
my $QMAX_BYTES = 262144;       # 256 kB
my $STALLED = 5;
# A frame is "id: <token>\nevent: turbo-stream\ndata: m<i>:<filler>\n\n".
my $FRAME = $PAYLOAD + 200;
# Memory bound. What the worker may legitimately hold for the stalled clients:
# per connection queue_max_bytes + one frame (the frame being written) +
# libmicrohttpd's 32 kB connection pool, i.e. ~350 kB x 5 = 1.8 MB; plus the
# payloads the hub reads back from the table (one at a time, 64 kB each: above
# inline_payload_max) and allocator slack (queued frames share one encoded
# body per stream, so it is less in practice). 20 MB is ten times that, and
# a third of what five unbounded stalled clients would pile up here (12.5 MiB
# each).
my $RSS_BOUND = 20 * 1024;    # kB

# send_queues returns { client port => bytes in the kernel's send queue } for
# the server's sockets on $port (/proc/net/tcp and tcp6: tx_queue).
sub send_queues
{
	my ($port) = @_;
	my %q;
	for my $f ('/proc/net/tcp', '/proc/net/tcp6')
	{
		open my $fh, '<', $f or next;
		<$fh>;
		while (my $l = <$fh>)
		{
			my (undef, $local, $remote, $st, $queues) = split ' ', $l;
			next unless $st eq '01';    # established
			my ($lp) = $local =~ /:([0-9A-F]+)$/;
			my ($rp) = $remote =~ /:([0-9A-F]+)$/;
			next unless hex($lp) == $port;
			my ($tx) = split /:/, $queues;
			$q{ hex $rp } = hex $tx;
		}
		close $fh;
	}
	return \%q;
}
my $SNDBUF_BOUND = 2 * 131072 + 65536;    # doubled SO_SNDBUF plus slack

sub proc_status
{
	my ($pid) = @_;
	my %v;
	open my $fh, '<', "/proc/$pid/status" or return {};
	while (<$fh>)
	{
		$v{$1} = $2 if /^(VmRSS|RssAnon|RssFile|RssShmem|VmHWM):\s+(\d+) kB/;
	}
	close $fh;
	return \%v;
}

sub percentile
{
	my ($p, @v) = @_;
	@v = sort { $a <=> $b } @v;
	return 0 unless @v;
	my $i = int($p / 100 * $#v + 0.5);
	return $v[$i];
}

# msg_index returns i for a frame whose data is "m<i>:<filler>" with the
# full filler, else undef.
sub msg_index
{
	my ($f) = @_;
	my $d = $f->{data} // return undef;
	return undef unless $d =~ /^m(\d+):/;
	my $i = $1;
	return undef unless length($d) == length("m$i:") + $PAYLOAD && substr($d, -1) eq 'x';
	return $i + 0;
}

# in_order checks frames carry exactly messages $from .. $to, in order.
sub exactly_range
{
	my ($frames, $from, $to, $name) = @_;
	my @got = map { msg_index($_) // -1 } @$frames;
	my @want = $from <= $to ? ($from .. $to) : ();
	my $ok = is_deeply(\@got, \@want, "$name: exactly messages $from..$to, in order, once each");
	diag("got: " . join(',', @got[0 .. ($#got < 20 ? $#got : 20)]) . (@got > 21 ? ',...' : '')) unless $ok;
	return $ok;
}

# reconnect_check: a client reconnecting with Last-Event-ID $id and reading
# promptly must get messages $from .. $N exactly once, in order, and no gap.
sub reconnect_check
{
	my ($pg, $id, $from, $name) = @_;
	my $r = eval { $pg->open_stream('slow', headers => { 'Last-Event-ID' => $id }) };
	if (!$r || $r->status != 200)
	{
		fail("$name ($id): 200") or diag($r ? 'status ' . $r->status : "no answer: $@");
		return;
	}
	pass("$name ($id): 200");
	# Up to 30 s; less once a gap notice shows that something will not come.
	my $want = $N - $from + 1;
	my ($deadline, $last_n, $last_t) = (time + 30, -1, time);
	while (time < $deadline && !$r->closed && scalar($r->data_events) < $want)
	{
		$r->poll(0.2);
		my $n = $r->event_count;
		($last_n, $last_t) = ($n, time) if $n != $last_n;
		last if time - $last_t > 2 && grep { ($_->{event} // '') eq 'pgbus:gap-detected' } $r->events;
	}
	ok(scalar($r->data_events) >= $want, "$name: the replay arrives")
	  or diag('events: ' . join(',', map { msg_index($_) // ($_->{event} // '?') . ($_->{data} && !defined msg_index($_) ? " $_->{data}" : '') } $r->events)
		  . ($r->closed ? ' (closed by the server)' : ''));
	$r->poll(0.5);
	exactly_range([ $r->data_events ], $from, $N, $name);
	ok(!grep({ ($_->{event} // '') eq 'pgbus:gap-detected' } $r->events), "$name: no gap notice during the replay");
	ok(!$r->closed, "$name: still connected after the replay");
	$r->close;
	return;
}

my %measured;

for my $policy (qw(lag drop_oldest drop_newest disconnect))
{
	note("==== overflow_policy = $policy");
	my $pg = PgbusNode->new(
		"slow_$policy", conf => qq{
pgbus_stream.overflow_policy = '$policy'
pgbus_stream.queue_max_events = $QMAX_EVENTS
pgbus_stream.queue_max_bytes = $QMAX_BYTES
});
	$pg->create_stream('slow');

	my $normal = $pg->open_stream('slow');
	is($normal->status, 200, "$policy: normal client connected");
	my ($since) = $normal->body =~ /since_id=(\S+)/;

	# The stalled clients read their response head (SSEClient->connect) and
	# then nothing: the preamble and everything after pile up in the kernel.
	my @stalled = map { $pg->sse('/streams/slow') } 1 .. $STALLED;
	is_deeply([ map { $_->status } @stalled ], [ (200) x $STALLED ], "$policy: $STALLED stalled clients connected");
	my $port0 = $stalled[0]{sock}->sockport;
	my %stalled_port = map { ($_->{sock}->sockport => 1) } @stalled;

	my ($worker, $pid) = split /\|/, $pg->safe_psql('postgres', 'SELECT worker, pid FROM pgbus_stream.workers()');
	ok($pid, "$policy: worker pid $pid");
	# connections() is refreshed twice a second.
	my $rows;
	my $deadline = time + 10;
	while (time < $deadline)
	{
		$rows = $pg->safe_psql('postgres', 'SELECT count(*) FROM pgbus_stream.connections()');
		last if $rows == $STALLED + 1;
		sleep 0.1;
	}
	is($rows, $STALLED + 1, "$policy: connections() lists every client");
	my $base = proc_status($pid);
	note("$policy: worker baseline VmRSS $base->{VmRSS} kB, RssAnon $base->{RssAnon} kB, RssShmem $base->{RssShmem} kB");

	# ---- the broadcasts, one commit each, paced by the normal client ----
	my $psql = psql_session($pg);
	my (@lat, @rss, $max_q_bytes, $max_q_events, @over_bound);
	my $max_sendq = 0;
	my $stalled_rows = 0; # rows of connections() that were stalled clients
	my $normal_ok = 1;
	my $t_start = time;
	for my $i (1 .. $N)
	{
		session_query($psql, "SELECT pgbus_stream.broadcast('slow', 'm$i:' || repeat('x', $PAYLOAD))");
		my $t0 = time;
		if (!$normal->wait_for_data_events($i, 10))
		{
			$normal_ok = 0;
			diag("$policy: the normal client did not get message $i within 10 s");
			last;
		}
		push @lat, time - $t0;
		if ($i % 10 == 0)
		{
			push @rss, proc_status($pid);
			my $sq = send_queues($pg->http_port);
			for my $p (keys %stalled_port)
			{
				$max_sendq = $sq->{$p} if defined $sq->{$p} && $sq->{$p} > $max_sendq;
			}
			for my $row (split /\n/, $pg->safe_psql('postgres',
				q{SELECT remote_addr, queued_events, queued_bytes, overflow_dropped, state FROM pgbus_stream.connections()}))
			{
				my ($addr, $qe, $qb, $dropped, $state) = split /\|/, $row;
				my ($p) = $addr =~ /:(\d+)$/;
				next unless $p && $stalled_port{$p};
				$stalled_rows++;
				$max_q_bytes = $qb if !defined $max_q_bytes || $qb > $max_q_bytes;
				$max_q_events = $qe if !defined $max_q_events || $qe > $max_q_events;
				push @over_bound, "after $i: $addr queued $qe events, $qb bytes"
				  if $qb > $QMAX_BYTES + $FRAME || $qe > $QMAX_EVENTS;
			}
		}
	}
	my $t_total = time - $t_start;
	session_end($psql);

	ok($normal_ok, "$policy: the normal client got each broadcast within 10 s of its commit");
	$normal->poll(0.5);
	exactly_range([ $normal->data_events ], 1, $N, "$policy: normal client");
	my @ids = map { $_->{id} } $normal->data_events;
	my $grow = 1;
	my $prev = $since;
	for my $id (@ids)
	{
		$grow = 0 unless parse_token($id) && $id ne $prev && token_le($prev, $id);
		$prev = $id;
	}
	ok($grow, "$policy: normal client ids grow");
	my ($p50, $p99, $pmax) = map { percentile($_, @lat) * 1000 } 50, 99, 100;
	ok($pmax < 2000, sprintf('%s: commit-to-receipt latency of the normal client: p50 %.1f ms, p99 %.1f ms, max %.1f ms (bound 2 s)',
		$policy, $p50, $p99, $pmax));
	note(sprintf('%s: %d broadcasts of %d kB in %.1f s', $policy, $N, $PAYLOAD / 1024, $t_total));

	# (under disconnect the stalled connections may be gone before the first look)
	ok($stalled_rows > 0 || $policy eq 'disconnect', "$policy: connections() listed the stalled connections ($stalled_rows rows)");
	ok(!@over_bound, "$policy: stalled connections stay within queue_max_bytes + one frame and queue_max_events")
	  or diag(join("\n", @over_bound));
	# (under disconnect the stalled sockets may be gone before the first look)
	ok(($max_sendq > 0 || $policy eq 'disconnect') && $max_sendq <= $SNDBUF_BOUND,
		"$policy: the kernel holds at most $SNDBUF_BOUND bytes per stalled socket (largest send queue seen: $max_sendq)");
	note("$policy: largest stalled queue seen: " . ($max_q_events // 'n/a') . ' events, ' . ($max_q_bytes // 'n/a') . ' bytes');

	my $peak = 0;
	my $peak_anon = 0;
	for my $s (@rss)
	{
		$peak = $s->{VmRSS} if ($s->{VmRSS} // 0) > $peak;
		$peak_anon = $s->{RssAnon} if ($s->{RssAnon} // 0) > $peak_anon;
	}
	my $final = proc_status($pid);
	ok($peak - $base->{VmRSS} < $RSS_BOUND,
		sprintf('%s: worker VmRSS %d kB -> peak %d kB (+%d kB, bound +%d kB)', $policy, $base->{VmRSS}, $peak,
			$peak - $base->{VmRSS}, $RSS_BOUND));
	ok($peak_anon - $base->{RssAnon} < $RSS_BOUND,
		sprintf('%s: worker RssAnon %d kB -> peak %d kB (+%d kB)', $policy, $base->{RssAnon}, $peak_anon,
			$peak_anon - $base->{RssAnon}));
	$measured{$policy} = {
		p50_ms => $p50, p99_ms => $p99, max_ms => $pmax, seconds => $t_total,
		rss_base_kb => $base->{VmRSS}, rss_peak_kb => $peak, anon_base_kb => $base->{RssAnon},
		anon_peak_kb => $peak_anon, max_queued_bytes => $max_q_bytes, max_queued_events => $max_q_events,
	};

	# ---- the first stalled client starts reading ----
	my $s = $stalled[0];
	if ($policy eq 'disconnect')
	{
		ok($s->wait_closed(15), "$policy: the stalled connection was closed by the server");
		my $gone = 0;
		$deadline = time + 5;
		while (time < $deadline && !$gone)
		{
			$gone = !grep { /:$port0$/ } split /\n/,
			  $pg->safe_psql('postgres', 'SELECT remote_addr FROM pgbus_stream.connections()');
			sleep 0.2 unless $gone;
		}
		ok($gone, "$policy: and is gone from connections()");
		my @got = grep { defined $_->{id} } $s->events;
		ok(!grep({ ($_->{event} // '') eq 'pgbus:gap-detected' } $s->events), "$policy: no gap notice");
		my $k = @got;
		exactly_range(\@got, 1, $k, "$policy: stalled client before the disconnect ($k frames)");
		ok($k < $N, "$policy: it was cut off before the end ($k of $N)");
		my $last = $k ? $got[-1]{id} : $since;
		$measured{$policy}{stalled_got} = $k;

		reconnect_check($pg, $last, $k + 1, "$policy: reconnect with the last id");
	}
	elsif ($policy eq 'lag')
	{
		ok($s->wait_for_data_events($N, 60), "$policy: the stalled client, reading again, gets every broadcast");
		$s->poll(0.5);
		exactly_range([ $s->data_events ], 1, $N, "$policy: stalled client");
		ok(!grep({ ($_->{event} // '') eq 'pgbus:gap-detected' } $s->events), "$policy: no gap notice");
		ok(!$s->closed, "$policy: and stays connected");
		$measured{$policy}{stalled_got} = scalar $s->data_events;
		$measured{$policy}{stalled_dropped} = 0;
	}
	else
	{
		my ($stalled_since) = $s->body =~ /since_id=(\S+)/;
		my $accounted = sub {
			my $n = 0;
			for my $e ($_[0]->events)
			{
				if (defined $e->{id}) { $n++ }
				elsif (($e->{event} // '') eq 'pgbus:gap-detected' && ($e->{data} // '') =~ /"dropped":(\d+)/) { $n += $1 }
			}
			return $n >= $N;
		};
		ok($s->wait_until($accounted, 30),
			"$policy: the stalled client, reading again, gets every frame or gap notice")
		  or diag("policy $policy: last frames: " . join(',', map { msg_index($_) // ($_->{event} // '?') } ($s->events)[-5 .. -1]));
		$s->poll(0.5);
		ok(!$s->closed, "$policy: and stays connected");
		my @ev = $s->events;
		my @gaps = grep { ($_->{event} // '') eq 'pgbus:gap-detected' } @ev;
		ok(@gaps >= 1, "$policy: it got pgbus:gap-detected (" . scalar(@gaps) . ' notice(s))');
		my $dropped = 0;
		for my $g (@gaps)
		{
			my ($n) = ($g->{data} // '') =~ /"dropped":(\d+)/;
			like($g->{data} // '', qr/^\{"reason":"overflow","dropped":\d+,"resume":"[A-Za-z0-9._~:,-]+"\}$/,
				"$policy: gap notice is JSON with the cursor to resume from: $g->{data}");
			is($g->{id}, undef, "$policy: gap notice carries no id");
			$dropped += $n // 0;
		}
		my @data = grep { defined $_->{id} } @ev;
		my @idx = map { msg_index($_) // -1 } @data;
		my $ordered = 1;
		for my $j (1 .. $#idx) { $ordered = 0 if $idx[$j] <= $idx[ $j - 1 ] }
		ok($ordered && !grep({ $_ < 0 } @idx), "$policy: received frames are whole, in order, no duplicate");
		is(scalar(@data) + $dropped, $N, "$policy: received (" . scalar(@data) . ") + reported dropped ($dropped) = $N");
		$measured{$policy}{stalled_got} = scalar @data;
		$measured{$policy}{stalled_dropped} = $dropped;
		if ($policy eq 'drop_newest')
		{
			exactly_range(\@data, 1, scalar @data, "$policy: what arrived is the oldest part");
		}
		else
		{
			is($idx[-1], $N, "$policy: the newest message arrived");
		}

		# Recovery: the first notice's "resume" cursor is the id of the last
		# frame the client received before the first dropped one (or, when
		# none had been written yet, where the client started); reconnecting
		# with it gets the rest.
		my ($resume) = ($gaps[0]{data} // '') =~ /"resume":"([^"]+)"/;
		ok(defined $resume, "$policy: the first notice names a resume cursor");
		$resume //= '';
		my ($before) = grep { ($_->{id} // '') eq $resume } @data;
		ok($before || $resume eq ($stalled_since // ''),
			"$policy: the resume cursor ($resume) is the id of a frame the client received, or where it started");
		my $k = $before ? msg_index($before) : 0;
		reconnect_check($pg, $resume, $k + 1, "$policy: reconnect with the notice's resume cursor");
	}

	# The other stalled clients: still bounded, or closed under disconnect.
	$_->close for @stalled;
	ok(!$normal->closed, "$policy: the normal client is still connected");
	$normal->close;
	my @w = split /\|/, $pg->safe_psql('postgres',
		'SELECT queued, overflow_dropped FROM pgbus_stream.workers()');
	note("$policy: workers(): queued $w[0], overflow_dropped $w[1]");
	if ($policy eq 'lag') { is($w[1], 0, "$policy: workers() counted no overflow drop") }
	elsif ($policy ne 'disconnect') { ok($w[1] > 0, "$policy: workers() counted overflow drops ($w[1])") }
	$pg->finish;
}

for my $policy (sort keys %measured)
{
	my $m = $measured{$policy};
	note(sprintf('measured %-11s normal client p50 %.1f ms p99 %.1f ms max %.1f ms; worker VmRSS %d -> %d kB, '
		  . 'RssAnon %d -> %d kB; stalled queue max %s events / %s bytes; stalled client got %s, dropped %s',
		$policy, @$m{qw(p50_ms p99_ms max_ms rss_base_kb rss_peak_kb anon_base_kb anon_peak_kb)},
		map { $_ // 'n/a' } @$m{qw(max_queued_events max_queued_bytes stalled_got stalled_dropped)}));
}
done_testing();
