# 030_hostile: what a hostile or broken client (or producer) can throw at the
# listener, on a real node with real sockets. README "Status codes" and "Guarantees".
#
# A. Connection flood: max_connections = 20. 25 sequential SSE connections:
#    20 get 200, 5 get 503 + Retry-After; a burst of requests written all at
#    once is admitted exactly up to the bound; closing some makes room again;
#    a broadcast still reaches every live connection exactly once;
#    connections() forgets closed connections.
# B. Slowloris: sockets that send their request one byte per second (or
#    nothing, or stop after a complete request) are closed within the
#    request timeout (10 s), while a normal client is served meanwhile.
# C. Oversized requests: request target > 8 KiB -> 414 (exactly 8192 is
#    fine), header block > 16 KiB -> 431, and far larger ones than
#    libmicrohttpd's per-connection memory are refused too; a 9 KB cookie
#    is served at the default settings, a 64 KB one gets 431.
# D. CORS: preflight and GET from an allowed origin, another origin, look-alike
#    origins; cors_origins = '*' after a reload.
# E. Framing: payloads with CR, LF, CRLF, a lone CR at the end, injected
#    "id:"/"event:"/"retry:" lines, empty payloads, UTF-8, 1 MiB payloads,
#    non-envelope JSON and a crafted event name written straight into the
#    queue table: exactly one frame per broadcast, the same data (lines
#    joined with \n, CR/CRLF read as \n), ids only from the server. Event
#    names with CR/LF/space are refused by broadcast() and nothing is
#    written. An event larger than queue_max_bytes becomes a gap notice.
#    (NUL cannot be in a text value. Invalid UTF-8 cannot be either in a
#    UTF8 database, which is checked; in another encoding it is sent.)
# F. Malformed requests (bad escapes, traversal, absolute-form, bad methods
#    and versions, junk) get 4xx; bytes written after a stream's request are
#    not read as requests and do not disturb the stream.
# Finally the server log must not show any process killed by a signal.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use Errno qw(EAGAIN EINTR EWOULDBLOCK EINPROGRESS);
use IO::Select;
use IO::Socket::INET;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode qw(parse_token token_le sql_literal);

$SIG{PIPE} = 'IGNORE';

my $MAXC = 20;
my $GOOD = 'https://good.example';
my $ALSO = 'https://also.example:8443';
my $pg = PgbusNode->new(
	'hostile', conf => qq{
pgbus_stream.max_connections = $MAXC
pgbus_stream.cors_origins = '$GOOD, $ALSO'
pgbus_stream.queue_max_bytes = '8MB'
});
my $port = $pg->http_port;
$pg->create_stream('chat');
my @start_pids = $pg->worker_pids;
is(scalar @start_pids, 1, "one worker at the start (@start_pids)");

# ---------------------------------------------------------------- helpers

sub sse_count
{
	return $pg->safe_psql('postgres',
		'SELECT coalesce(sum(connections), 0) FROM pgbus_stream.workers()');
}

# wait_sse_count waits until the workers hold exactly $n SSE connections.
sub wait_sse_count
{
	my ($n, $timeout) = @_;
	my $deadline = time + ($timeout // 10);
	my $last;
	while (time < $deadline)
	{
		$last = sse_count();
		return 1 if $last == $n;
		sleep 0.1;
	}
	diag("workers hold $last SSE connections, expected $n");
	return 0;
}

sub tcp_connect
{
	my $s = IO::Socket::INET->new(
		PeerAddr => '127.0.0.1',
		PeerPort => $port,
		Proto => 'tcp',
		Timeout => 5) or die "connect to $port: $@";
	$s->blocking(0);
	return $s;
}

# parse_response splits raw bytes into status, headers (lower-case keys) and
# body (content-length bodies only; chunked bodies are left as they are).
sub parse_response
{
	my ($in) = @_;
	my $end = index($in, "\r\n\r\n");
	return undef if $end < 0;
	my ($status_line, @lines) = split /\r\n/, substr($in, 0, $end);
	my %h;
	for (@lines)
	{
		$h{ lc $1 } = $2 if /^([^:]+):\s*(.*?)\s*$/;
	}
	my ($status) = ($status_line // '') =~ m{^HTTP/\d\.\d (\d{3})};
	return { status => $status // 0, headers => \%h, body => substr($in, $end + 4) };
}

sub response_complete
{
	my ($in) = @_;
	my $r = parse_response($in);
	return 0 unless $r;
	return 1 if $r->{status} == 200;    # a stream: the head is enough
	my $cl = $r->{headers}{'content-length'};
	return defined $cl ? length($r->{body}) >= $cl : 0;
}

# raw_request writes $req on a new connection, tolerating a server that
# answers and closes before the request is all sent, and reads until the
# response is complete (and what arrived matches $until, when given), the
# connection ends or $timeout passes. Returns
# { status, headers, body, error, closed, sent }.
sub raw_request
{
	my ($req, $timeout, $until) = @_;
	my $s = tcp_connect();
	my $sel = IO::Select->new($s);
	my $deadline = time + ($timeout // 10);
	my ($off, $in, $err, $closed) = (0, '', undef, 0);
	while (time < $deadline)
	{
		my $writing = $off < length $req;
		my ($r, $w) = IO::Select->select($sel, $writing ? $sel : undef, undef, 0.1);
		if ($r && @$r)
		{
			my $n = sysread($s, my $buf, 65536);
			if (!defined $n)
			{
				if ($! != EAGAIN && $! != EWOULDBLOCK && $! != EINTR)
				{
					$err = "$!";
					last;
				}
			}
			elsif ($n == 0)
			{
				$closed = 1;
				last;
			}
			else
			{
				$in .= $buf;
				last if response_complete($in) && (!$until || $in =~ $until);
			}
		}
		if ($writing && $w && @$w)
		{
			my $n = syswrite($s, $req, 65536, $off);
			if (defined $n)
			{
				$off += $n;
			}
			elsif ($! != EAGAIN && $! != EWOULDBLOCK && $! != EINTR)
			{
				$err = "write: $!";
				$off = length $req;    # stop writing; what was answered may still be read
			}
		}
	}
	close $s;
	my $res = parse_response($in) // { status => 0, headers => {}, body => $in };
	$res->{error} = $err;
	$res->{closed} = $closed;
	$res->{sent} = $off;
	return $res;
}

sub describe
{
	my ($r) = @_;
	return "status $r->{status}"
	  . ($r->{error} ? ", error $r->{error}" : '')
	  . ($r->{closed} ? ', closed' : '')
	  . ", body '" . substr($r->{body} // '', 0, 80) . "'";
}

sub get_request
{
	my ($target, @headers) = @_;
	my $req = "GET $target HTTP/1.1\r\nHost: 127.0.0.1:$port\r\nAccept: text/event-stream\r\n";
	$req .= "$_\r\n" for @headers;
	return "$req\r\n";
}

# ================================================================ A. flood
note('A. connection flood');
ok(wait_sse_count(0), 'no SSE connection before the flood');

my (@live, @refused);
for my $i (1 .. $MAXC + 5)
{
	my $c = eval { $pg->sse('/streams/chat', timeout => 5) };
	if (!$c)
	{
		fail("flood connection $i answered") or diag($@);
		next;
	}
	if ($c->status == 200) { push @live, $c }
	else { push @refused, $c }
}
is(scalar @live, $MAXC, "$MAXC of " . ($MAXC + 5) . ' connections get 200');
is(scalar @refused, 5, 'the other 5 are refused');
for my $c (@refused)
{
	is($c->status, 503, 'over capacity: 503');
	like($c->header('retry-after') // '', qr/^\d+$/, 'with a numeric Retry-After ('
		  . ($c->header('retry-after') // 'none') . ')');
	isnt($c->header('content-type') // '', 'text/event-stream', '503 is not an event stream');
	ok($c->wait_closed(5), '503 response ends');
	$c->close;
}
my $ok = 1;
$ok &&= $_->wait_for_events(1, 10) for @live;
ok($ok, 'every admitted connection got its preamble');
is(sse_count(), $MAXC, "workers() reports $MAXC connections");

my $id1 = $pg->broadcast('chat', 'after the flood');
$ok = 1;
for my $c (@live)
{
	$ok &&= $c->wait_for_data_events(1, 10);
}
ok($ok, 'a broadcast reaches all live connections after the flood');
is_deeply([ map { scalar $_->data_events } @live ], [ (1) x $MAXC ], 'exactly once each');

# Close 5, and 5 new ones get in; one more is refused again.
$_->close for splice(@live, 0, 5);
ok(wait_sse_count($MAXC - 5), 'closed connections are released');
for my $i (1 .. 5)
{
	my $c = eval { $pg->sse('/streams/chat', timeout => 5) };
	ok($c && $c->status == 200, "new connection $i after closing some: 200")
	  or diag($@ || 'status ' . $c->status);
	push @live, $c if $c && $c->status == 200;
}
{
	my $c = eval { $pg->sse('/streams/chat', timeout => 5) };
	is($c ? $c->status : $@, 503, 'full again: 503');
	$c->close if $c;
}
$ok = 1;
$ok &&= $_->wait_for_events(1, 10) for @live;
ok($ok, 'new connections got their preamble');
my $id2 = $pg->broadcast('chat', 'after reopening');
$ok = 1;
for my $c (@live)
{
	$ok &&= $c->wait_until(sub { grep { $_->{data} eq 'after reopening' } $_[0]->data_events }, 10);
}
ok($ok, 'a second broadcast reaches all live connections');
$_->poll(0.3) for @live;
my @counts = map { scalar $_->data_events } @live;
is_deeply(\@counts, [ (2) x ($MAXC - 5), (1) x 5 ], 'old connections got both broadcasts, new ones the second, once');
$_->close for @live;
@live = ();
ok(wait_sse_count(0), 'all flood connections released');
# connections() is a snapshot the worker refreshes about twice a second; it
# must not keep listing a connection that is gone. Closing the only
# connection right after it shows up (i.e. just after a refresh) is the
# case to get right: the worker has nothing else to wake it up.
for my $round (1 .. 3)
{
	my $one = $pg->open_stream('chat');
	my $rows;
	my $deadline = time + 5;
	while (time < $deadline)
	{
		$rows = $pg->safe_psql('postgres', 'SELECT count(*) FROM pgbus_stream.connections()');
		last if $rows == 1;
		sleep 0.05;
	}
	$one->close;
	$deadline = time + 3;
	while (time < $deadline)
	{
		$rows = $pg->safe_psql('postgres', 'SELECT count(*) FROM pgbus_stream.connections()');
		last if $rows == 0;
		sleep 0.1;
	}
	is($rows, 0, "round $round: connections() forgets a closed connection within 3 s");
	last if $rows != 0;
}

# A burst: 30 requests written back to back before reading any answer.
{
	my @socks = map { tcp_connect() } 1 .. 30;
	my $req = get_request('/streams/chat');
	for my $s (@socks)
	{
		my $n = syswrite($s, $req);
		die "short write" unless defined $n && $n == length $req;
	}
	my %status;
	my @open;
	my $deadline = time + 15;
	for my $s (@socks)
	{
		my $in = '';
		my $sel = IO::Select->new($s);
		while (time < $deadline && !parse_response($in))
		{
			next unless $sel->can_read(0.2);
			my $n = sysread($s, my $buf, 65536);
			last if defined $n && $n == 0;
			$in .= $buf if $n;
		}
		my $r = parse_response($in);
		my $st = $r ? $r->{status} : 'none';
		$status{$st}++;
		push @open, $s if $st eq '200';
		close $s unless $st eq '200';
	}
	is($status{200} // 0, $MAXC, "burst of 30: exactly $MAXC admitted");
	is($status{503} // 0, 30 - $MAXC, 'burst of 30: the rest get 503')
	  or diag(explain(\%status));
	close $_ for @open;
	ok(wait_sse_count(0), 'burst connections released');
}

# ================================================================ B. slowloris
note('B. slowloris');
{
	my $req = get_request('/streams/chat', 'X-Slow: ' . ('a' x 40));
	my @slow;    # { sock, t0, closed_at, sent, got }
	for my $kind (qw(byte byte byte byte silent headers_no_end))
	{
		push @slow, { kind => $kind, sock => tcp_connect(), t0 => time, sent => 0, got => '' };
	}
	# One that never ends its header block: the whole head but the final CRLF.
	my $nearly = substr($req, 0, -2);

	my ($normal, $normal_t, $normal_latency);
	my $next_tick = time;
	my $deadline = time + 16;
	while (time < $deadline && grep { !defined $_->{closed_at} } @slow)
	{
		my $now = time;
		if ($now >= $next_tick)
		{
			$next_tick += 1;
			for my $s (grep { !defined $_->{closed_at} } @slow)
			{
				my $chunk;
				if ($s->{kind} eq 'byte') { $chunk = substr($req, $s->{sent}, 1) }
				elsif ($s->{kind} eq 'headers_no_end' && $s->{sent} == 0) { $chunk = $nearly }
				next unless defined $chunk && length $chunk;
				my $n = syswrite($s->{sock}, $chunk);
				if (defined $n) { $s->{sent} += $n }
				elsif ($! != EAGAIN && $! != EWOULDBLOCK) { $s->{closed_at} = time; $s->{how} = "write: $!" }
			}
		}
		for my $s (grep { !defined $_->{closed_at} } @slow)
		{
			my $n = sysread($s->{sock}, my $buf, 4096);
			if (defined $n && $n == 0) { $s->{closed_at} = time; $s->{how} = 'EOF' }
			elsif (defined $n) { $s->{got} .= $buf }
			elsif ($! != EAGAIN && $! != EWOULDBLOCK) { $s->{closed_at} = time; $s->{how} = "read: $!" }
		}
		# A normal client, 3 s into the attack, is served at once.
		if (!$normal && $now - $slow[0]{t0} >= 3)
		{
			my $t0 = time;
			$normal = eval { $pg->sse('/streams/chat', timeout => 5) };
			$normal_t = time - $t0;
			if ($normal && $normal->status == 200)
			{
				$normal->wait_for_events(1, 5);
				my $t1 = time;
				$pg->broadcast('chat', 'during slowloris');
				$normal->wait_for_data_events(1, 5);
				$normal_latency = time - $t1;
			}
		}
		sleep 0.05;
	}
	ok($normal && $normal->status == 200, sprintf('a normal client is admitted during the attack (%.3f s)', $normal_t // -1));
	ok($normal && ($normal->data_events)[0] && ($normal->data_events)[0]{data} eq 'during slowloris',
		sprintf('and gets a broadcast (%.3f s incl. psql)', $normal_latency // -1));
	for my $s (@slow)
	{
		my $dt = defined $s->{closed_at} ? $s->{closed_at} - $s->{t0} : undef;
		ok(defined $dt && $dt <= 12.5,
			sprintf('slowloris (%s, %d bytes sent) closed after %s s (%s)',
				$s->{kind}, $s->{sent}, defined $dt ? sprintf('%.1f', $dt) : 'never', $s->{how} // 'open'));
		ok(defined $dt && $dt >= 8, "slowloris ($s->{kind}) not cut before the request timeout")
		  if defined $dt;
		unlike($s->{got}, qr{^HTTP/1\.\d 200}, "slowloris ($s->{kind}) never got a stream");
		close $s->{sock};
	}
	ok($normal && !$normal->closed, 'the normal client is still connected');
	$pg->broadcast('chat', 'after slowloris');
	ok($normal && $normal->wait_for_data_events(2, 5), 'and still receives');
	$normal->close if $normal;
}

# ================================================================ C. oversized requests
note('C. oversized requests');
{
	my $base = '/streams/chat?pad=';
	my $t8192 = $base . ('a' x (8192 - length $base));
	my $r = raw_request(get_request($t8192));
	is($r->{status}, 200, 'request target of exactly 8192 bytes: 200') or diag(describe($r));
	$r = raw_request(get_request($t8192 . 'a'));
	is($r->{status}, 414, 'request target of 8193 bytes: 414') or diag(describe($r));
	$r = raw_request(get_request($base . ('a' x 9000)));
	is($r->{status}, 414, 'request target of 9 KiB: 414') or diag(describe($r));
	$r = raw_request(get_request($base . ('a' x 200_000)));
	is($r->{status}, 414, 'request target of 200 KB: 414') or diag(describe($r));

	my @pad = map { sprintf('X-Pad-%02d: %s', $_, 'b' x 1000) } 1 .. 20;
	$r = raw_request(get_request('/streams/chat', @pad));
	is($r->{status}, 431, '20 KB of header lines: 431') or diag(describe($r));
	$r = raw_request(get_request('/streams/chat', 'X-Big: ' . ('c' x 17_000)));
	is($r->{status}, 431, 'one 17 KB header line: 431') or diag(describe($r));
	$r = raw_request(get_request('/streams/chat', map { sprintf('X-Pad-%03d: %s', $_, 'd' x 1000) } 1 .. 200));
	is($r->{status}, 431, '200 KB of header lines: 431') or diag(describe($r));
	# Cookies of several kB are common; the default connection_memory takes them.
	$r = raw_request(get_request('/streams/chat', 'Cookie: s=' . ('e' x 9000)));
	is($r->{status}, 200, 'a 9 KB Cookie header at the default settings: 200') or diag(describe($r));
	$r = raw_request(get_request('/streams/chat', 'Cookie: s=' . ('f' x 65_536)));
	is($r->{status}, 431, 'a 64 KB Cookie header: 431') or diag(describe($r));
	$r = raw_request(get_request('/streams/chat', 'X-Small: 1'));
	is($r->{status}, 200, 'a normal request afterwards: 200') or diag(describe($r));
	ok(wait_sse_count(0), 'oversize tests left no connection behind');
}

# ================================================================ D. CORS
note('D. CORS');
{
	my %pre = (
		method => 'OPTIONS',
		timeout => 5);
	my $r = $pg->sse('/streams/chat', %pre, headers => {
		Origin => $GOOD, 'Access-Control-Request-Method' => 'GET',
		'Access-Control-Request-Headers' => 'last-event-id' });
	is($r->status, 204, 'preflight from an allowed origin: 204');
	is($r->header('access-control-allow-origin'), $GOOD, 'preflight: Access-Control-Allow-Origin echoes the origin');
	like($r->header('access-control-allow-methods') // '', qr/\bGET\b/, 'preflight: GET allowed');
	like($r->header('access-control-allow-headers') // '', qr/\bLast-Event-ID\b/i, 'preflight: Last-Event-ID allowed');
	like($r->header('vary') // '', qr/\bOrigin\b/, 'preflight: Vary: Origin');
	$r->close;

	$r = $pg->sse('/streams/chat', %pre, headers => { Origin => $ALSO, 'Access-Control-Request-Method' => 'GET' });
	is($r->status, 204, 'preflight from the second listed origin: 204');
	is($r->header('access-control-allow-origin'), $ALSO, 'second origin echoed');
	$r->close;

	for my $o ('https://evil.example', 'https://good.example.evil.example', 'http://good.example',
		'https://GOOD.example', 'null', "$GOOD, https://evil.example")
	{
		$r = $pg->sse('/streams/chat', %pre, headers => { Origin => $o, 'Access-Control-Request-Method' => 'GET' });
		is($r->status, 403, "preflight from '$o': 403");
		is($r->header('access-control-allow-origin'), undef, "preflight from '$o': no Access-Control-Allow-Origin");
		$r->close;

		$r = $pg->sse('/streams/chat', headers => { Origin => $o }, timeout => 5);
		is($r->status, 403, "GET from '$o': 403");
		is($r->header('access-control-allow-origin'), undef, "GET from '$o': no Access-Control-Allow-Origin");
		$r->close;
	}
	$r = $pg->sse('/nope', %pre, headers => { Origin => $GOOD });
	is($r->status, 404, 'preflight on an unknown path: 404');
	$r->close;

	$r = $pg->open_stream('chat', headers => { Origin => $GOOD });
	is($r->status, 200, 'GET from an allowed origin: 200');
	is($r->header('access-control-allow-origin'), $GOOD, 'GET: Access-Control-Allow-Origin echoes the origin');
	like($r->header('vary') // '', qr/\bOrigin\b/, 'GET: Vary: Origin');
	ok($r->event_count >= 1, 'GET from an allowed origin streams');
	$r->close;
	$r = $pg->open_stream('chat');
	is($r->status, 200, 'GET without Origin (not a browser): 200');
	is($r->header('access-control-allow-origin'), undef, 'without Origin: no CORS header');
	$r->close;

	$pg->safe_psql('postgres', q{ALTER SYSTEM SET pgbus_stream.cors_origins = '*'});
	$pg->safe_psql('postgres', 'SELECT pg_reload_conf()');
	my $got;
	my $deadline = time + 10;
	while (time < $deadline)
	{
		$r = $pg->sse('/streams/chat', headers => { Origin => 'https://any.example' }, timeout => 5);
		$got = $r->status;
		my $acao = $r->header('access-control-allow-origin');
		$r->close;
		if ($got == 200)
		{
			ok(defined $acao && ($acao eq 'https://any.example' || $acao eq '*'),
				"cors_origins = '*': any origin gets Access-Control-Allow-Origin (" . ($acao // 'none') . ')');
			last;
		}
		sleep 0.2;
	}
	is($got, 200, "cors_origins = '*' after a reload: any origin is served");
	$pg->safe_psql('postgres', 'ALTER SYSTEM RESET pgbus_stream.cors_origins');
	$pg->safe_psql('postgres', 'SELECT pg_reload_conf()');
}

# ================================================================ E. framing
note('E. framing');
my $c = $pg->open_stream('chat');
is($c->status, 200, 'framing subscriber connected');
my ($since) = $c->body =~ /since_id=(\S+)/;
my @expect;    # [label, expected data, expected event]

my @payloads = (
	[ 'CR', "a\rb" ],
	[ 'LF', "a\nb" ],
	[ 'CRLF', "a\r\nb" ],
	[ 'lone CR at the end', "ends with CR\r" ],
	[ 'LF at the end', "ends with LF\n" ],
	[ 'CRLF at the end', "ends with CRLF\r\n" ],
	[ 'only CR', "\r" ],
	[ 'CR CR LF LF', "\r\r\n\n" ],
	[ 'frame injection', "\n\nid: 999\nevent: evil\ndata: x" ],
	[ 'CRLF frame injection', "x\r\n\r\nid: 998\r\nevent: evil\r\nretry: 1\r\n\r\ndata: y\r\n\r\n" ],
	[ 'CR frame injection', "x\r\rid: 997\revent: evil\r\r" ],
	[ 'field lines without a break', "id: 996\tevent: evil data: z" ],
	[ 'comment and retry', ": comment\nretry: 1\n: heartbeat 1" ],
	[ 'empty', '' ],
	[ 'spaces', '   ' ],
	[ 'leading space and colon', ' : x' ],
	[ 'UTF-8', "h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80 \xe2\x80\xa8 \xc2\x85" ],
	[ 'control characters', "bell\x07 esc\x1b[31m del\x7f vt\x0b ff\x0c" ],
);
# Invalid UTF-8 cannot be stored in a UTF8 database (the cluster's encoding
# follows the locale initdb ran under); elsewhere it must pass through as bytes.
my $encoding = $pg->safe_psql('postgres', 'SHOW server_encoding');
if ($encoding eq 'UTF8')
{
	my ($ret, $out, $err) = $pg->psql('postgres', q{SELECT pgbus_stream.broadcast('chat', E'bad \xff\xfe utf8')});
	isnt($ret, 0, 'UTF8 database: a payload with invalid UTF-8 is refused before it reaches a client');
}
else
{
	note("server_encoding $encoding: invalid UTF-8 is a possible payload");
	push @payloads, [ 'invalid UTF-8', "bad \xff\xfe\xc3 utf8 \xed\xa0\x80" ];
}
for my $p (@payloads)
{
	my ($label, $data) = @$p;
	$pg->broadcast('chat', $data);
	push @expect, [ $label, $data =~ s/\r\n|\r|\n/\n/gr, 'turbo-stream' ];
}

# Large payloads, built by the server (no 1 MiB statement in the log).
my @big = (
	[ '1 MiB, one line', q{repeat('x', 1048576)}, 'x' x 1048576 ],
	[ '1 MiB, LF lines', q{repeat('abcdefghijklmno' || chr(10), 65536)}, "abcdefghijklmno\n" x 65536 ],
	[ '1 MiB, CRLF lines', q{repeat('0123456789abcd' || chr(13) || chr(10), 65536)}, "0123456789abcd\n" x 65536 ],
	[ '1 MiB, CR lines with injection', q{repeat(chr(13) || 'id: 5' || chr(13) || 'event: evil' || chr(13), 40000)},
		"\nid: 5\nevent: evil\n" x 40000 ],
);
for my $b (@big)
{
	my ($label, $sql, $want) = @$b;
	$pg->safe_psql('postgres', "SELECT pgbus_stream.broadcast('chat', $sql)");
	push @expect, [ $label, $want, 'turbo-stream' ];
}

# Event names: valid ones arrive as given; invalid ones are refused and
# nothing is written.
for my $ev ('custom:event', 'a' x 64, q{!#$%&'*+-./:;<=>?@[]^_`{|}~})
{
	$pg->broadcast('chat', "with event $ev", $ev);
	push @expect, [ "event name $ev", "with event $ev", $ev ];
}
my $rows_before = $pg->safe_psql('postgres', 'SELECT count(*) FROM pgbus_stream.q_pgbus_chat');
for my $ev ("a\nb", "a\rb", "a\r\nb", "evil\n\nid: 999", 'a b', "a\tb", '', ' ', 'a' x 65, "caf\xc3\xa9", "x\n")
{
	my ($ret, $out, $err) = $pg->psql('postgres',
		"SELECT pgbus_stream.broadcast('chat', 'must not arrive', " . sql_literal($ev) . ')');
	my $shown = sql_literal($ev);
	isnt($ret, 0, "broadcast with event name $shown fails");
	like($err, qr/invalid event name/, "event name $shown: error names the problem");
	my ($r2, $out2, $err2) = $pg->psql('postgres',
		"SELECT pgbus_stream.broadcast('chat', 'must not arrive', " . sql_literal($ev) . ', durable => false)');
	isnt($r2, 0, "ephemeral broadcast with event name $shown fails");
}
is($pg->safe_psql('postgres', 'SELECT count(*) FROM pgbus_stream.q_pgbus_chat'), $rows_before,
	'refused broadcasts wrote no row');

# Rows written into the queue table directly, not through broadcast():
# other JSON is sent as its text; a crafted event name must not split the frame.
$pg->safe_psql('postgres', q{INSERT INTO pgbus_stream.q_pgbus_chat (vt, message) VALUES
  (now(), to_jsonb(E'json string\nwith a line break'::text)),
  (now(), '{"a": "x\ny", "b": [1, 2]}'::jsonb)});
for my $m (reverse split /\n/, $pg->safe_psql('postgres',
	q{SELECT message::text FROM pgbus_stream.q_pgbus_chat ORDER BY msg_id DESC LIMIT 2}))
{
	push @expect, [ "raw JSON $m", $m, 'turbo-stream' ];
}
$pg->safe_psql('postgres', q{INSERT INTO pgbus_stream.q_pgbus_chat (vt, message) VALUES
  (now(), jsonb_build_object('html', 'crafted event', 'event', E'evil\r\nid: 995\r\n\r\ndata: injected'))});
push @expect, [ 'crafted event name in the table', 'crafted event', undef ];
$pg->broadcast('chat', 'the end');
push @expect, [ 'last', 'the end', 'turbo-stream' ];

ok($c->wait_for_data_events(scalar @expect, 30), 'every framing broadcast arrives')
  or diag('got ' . scalar($c->data_events) . ' of ' . scalar(@expect));
$c->poll(1);    # anything extra gets a chance to show
my @d = $c->data_events;
is(scalar @d, scalar @expect, 'exactly one frame per broadcast');
for my $i (0 .. $#expect)
{
	my ($label, $want, $event) = @{ $expect[$i] };
	my $f = $d[$i] // {};
	my $same = defined $f->{data} && $f->{data} eq $want;
	ok($same, "$label: same data" . (length $want > 200 ? ' (' . length($want) . ' bytes)' : ''))
	  or diag('got ' . sql_literal(substr($f->{data} // '<none>', 0, 200)) . ' want ' . sql_literal(substr($want, 0, 200)));
	if (defined $event)
	{
		is($f->{event}, $event, "$label: event name");
	}
	else
	{
		note("$label: arrived with event name " . sql_literal($f->{event}));
		isnt($f->{event} // '', 'evil', "$label: the crafted name does not end the event line early");
	}
	is(scalar @{ $f->{all_id} // [] }, 1, "$label: one id line");
	is(scalar @{ $f->{all_event} // [] }, 1, "$label: one event line");
	is($f->{unknown}, undef, "$label: no other field");
	is($f->{retry}, undef, "$label: no retry field");
}
my @bad_ids;
my $prev = $since;
for my $f (@d)
{
	my $id = $f->{id} // '';
	push @bad_ids, $id unless parse_token($id) && $id ne $prev && token_le($prev, $id);
	$prev = $id;
}
ok(!@bad_ids, 'every id is a growing server cursor token') or diag("bad ids: @bad_ids");
ok(!grep({ ($_->{event} // '') eq 'evil' || ($_->{id} // '') =~ /^99\d$|^5$/ } $c->events),
	'no injected frame, event or id');
ok(($c->retry // 0) >= 1000 && $c->retry <= 3000, 'retry stays the server\'s (1 to 3 s)');
ok(!$c->protocol_error, 'no HTTP framing error') or diag($c->protocol_error);

# An event larger than queue_max_bytes is still delivered (a queue without
# data frames takes one of any size), whole, and later events follow.
$pg->safe_psql('postgres', q{ALTER SYSTEM SET pgbus_stream.queue_max_bytes = '64kB'});
$pg->safe_psql('postgres', 'SELECT pg_reload_conf()');
sleep 1;    # the worker applies the reload at its next wake-up (at most 0.5 s with a connection open)
$c->take_events;
$pg->safe_psql('postgres', q{SELECT pgbus_stream.broadcast('chat', repeat('z', 100000))});
$pg->broadcast('chat', 'small after big');
ok($c->wait_until(sub { grep { ($_->{data} // '') eq 'small after big' } $_[0]->events }, 10),
	'an event after an oversized one arrives');
my @tail = $c->take_events;
ok(grep({ ($_->{data} // '') eq 'z' x 100000 } @tail), 'the oversized event itself arrives, whole')
  or diag(explain([ map { [ $_->{event}, length($_->{data} // '') ] } @tail ]));
ok(!grep({ ($_->{event} // '') eq 'pgbus:gap-detected' } @tail), 'no gap notice for it');
$pg->safe_psql('postgres', 'ALTER SYSTEM RESET pgbus_stream.queue_max_bytes');
$pg->safe_psql('postgres', 'SELECT pg_reload_conf()');
$c->close;

# ================================================================ F. malformed requests
note('F. malformed requests');
{
	my @cases = (
		[ 'absolute-form target', "GET http://127.0.0.1:$port/streams/chat HTTP/1.1\r\nHost: x\r\n\r\n", qr/^4\d\d$/ ],
		[ 'encoded NUL in the name', get_request('/streams/chat%00'), qr/^404$/ ],
		[ 'encoded slash in the name', get_request('/streams/chat%2Fx'), qr/^404$/ ],
		[ 'dot segments', get_request('/streams/../streams/chat'), qr/^404$/ ],
		[ 'encoded dot segments', get_request('/streams/..%2F..%2Fetc%2Fpasswd'), qr/^404$/ ],
		[ 'bad escape in the name', get_request('/streams/ch%zzat'), qr/^404$/ ],
		[ 'bad escape in the query', get_request('/streams/chat?since=%zz'), qr/^400$/ ],
		[ 'truncated escape in the query', get_request('/streams/chat?since=%4'), qr/^400$/ ],
		[ 'NUL in the query', get_request('/streams/chat?since=1%00'), qr/^400$/ ],
		[ 'name too long', get_request('/streams/' . ('n' x 129)), qr/^404$/ ],
		[ 'too many streams', get_request('/streams?' . join('&', map { "stream=s$_" } 1 .. 40)), qr/^400$/ ],
		[ 'lower-case method', "get /streams/chat HTTP/1.1\r\nHost: x\r\n\r\n", qr/^4\d\d$/ ],
		[ 'unknown method', "BREW /streams/chat HTTP/1.1\r\nHost: x\r\n\r\n", qr/^405$/ ],
		[ 'no HTTP version', "GET /streams/chat\r\n\r\n", qr/^400$/ ],
		[ 'bad HTTP version', "GET /streams/chat HTTP/9.9\r\nHost: x\r\n\r\n", qr/^505$/ ],
		[ 'HTTP/1.1 without Host (RFC 9112: 400)', "GET /streams/chat HTTP/1.1\r\n\r\n", qr/^400$/ ],
		[ 'header without a colon', "GET /streams/chat HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", qr/^400$/ ],
		[ 'GET with a chunked body', "GET /streams/chat HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", qr/^400$/ ],
		[ 'GET with a huge Content-Length', "GET /streams/chat HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n", qr/^4\d\d$/ ],
		# libmicrohttpd 0.9 answers 400; 1.0 (Debian trixie's) closes unanswered.
		[ 'binary junk', join('', map { chr(($_ * 37) % 256) } 0 .. 4095) . "\r\n\r\n", qr/^(?:400|0)$/ ],
		# RFC 9112 2.2: a recipient may take a bare LF as a line end; libmicrohttpd does.
		[ 'bare LF line ends', "GET /streams/chat HTTP/1.1\nHost: x\n\n", qr/^200$/, 'since_id=' ],
		# obs-fold: libmicrohttpd 0.9 drops the folded header, so the stream
		# starts "now", not after msg_id 1 (checked below: the preamble's
		# since_id); 1.0 joins the lines, and the joined value is refused as
		# a cursor (400).
		[ 'Last-Event-ID with CR LF inside', get_request('/streams/chat', "Last-Event-ID: 1\r\n id: 5"), qr/^(?:200|400)$/, 'since_id=', qr/invalid cursor/ ],
		# a public stream ignores Authorization
		[ 'Authorization junk', get_request('/streams/chat', 'Authorization: Bearer ' . ('\x01' x 100)), qr/^200$/, 'since_id=' ],
	);
	my ($pos) = $pg->safe_psql('postgres', q{SELECT newest_id FROM pgbus_stream.stats() WHERE stream = 'chat'});
	for my $case (@cases)
	{
		my ($label, $req, $want, $stream, $refusal) = @$case;
		my $r = raw_request($req, 5);
		like($r->{status}, $want, "$label: $r->{status}") or diag(describe($r));
		if ($refusal && $r->{status} == 400)
		{
			like($r->{body}, $refusal, "$label: refused as such");
			next;
		}
		next unless $stream;
		# A stream answered 200: its preamble starts from now (the newest id), so
		# nothing in the request was taken for a cursor. Read until it arrives.
		my $r2 = raw_request($req, 5, qr/since_id=\S+ stream=chat\n/);
		my ($since) = $r2->{body} =~ /since_id=(\S+) stream=chat\n/;
		my $p = parse_token($since);
		ok($p && $p->{horizon} == $pos, "$label: a real stream from now (since_id=" . ($since // 'none') . ')')
		  or diag(describe($r2));
	}

	# A stream whose client keeps writing after its request (a pipelined
	# request, then junk) keeps streaming; the extra bytes are not read as
	# requests.
	my $s = $pg->open_stream('chat');
	is($s->status, 200, 'a stream for the pipelining check');
	my $junk = get_request('/streams/chat') . "POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello" . ('j' x 100_000);
	my $sent = 0;
	my $deadline = time + 5;
	while ($sent < length $junk && time < $deadline)
	{
		my $n = syswrite($s->{sock}, $junk, length($junk) - $sent, $sent);
		if (defined $n) { $sent += $n }
		else { last unless $! == EAGAIN || $! == EWOULDBLOCK; sleep 0.05 }
	}
	note("wrote $sent bytes of junk after the request");
	$pg->broadcast('chat', 'after junk');
	ok($s->wait_until(sub { grep { ($_->{data} // '') eq 'after junk' } $_[0]->data_events }, 10),
		'the stream still delivers after the client wrote junk');
	is(scalar(grep { ($_->{event} // '') eq 'pgbus:connected' } $s->events), 1,
		'and the junk did not start a second stream on it');
	ok(!$s->protocol_error, 'no HTTP framing error') or diag($s->protocol_error);
	$s->close;
}

# Still healthy after all of it.
my $h = $pg->open_stream('chat');
is($h->status, 200, 'the listener still serves');
$pg->broadcast('chat', 'final');
ok($h->wait_until(sub { grep { ($_->{data} // '') eq 'final' } $_[0]->data_events }, 10), 'and delivers');
$h->close;
is_deeply([ $pg->worker_pids ], \@start_pids, 'the worker is still the process it was at the start (no restart)');

$pg->finish;
done_testing();
