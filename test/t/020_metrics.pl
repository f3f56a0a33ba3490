# 020_metrics: the figures agree with what really happened. N broadcasts to
# M live subscribers make stats() queued grow by exactly N*M, and
# /metrics (read with a strict parser of the Prometheus text format 0.0.4,
# written below) shows the same number; /stats.json agrees; connections()
# lists the M connections within a second; /healthz answers 200. Then the
# same with two workers sharing the port: whichever worker answers /metrics,
# the per-stream figures are the sum over both.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use JSON::PP ();
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my $STREAM = 'metrics_chat';
my ($N, $M) = (7, 3);

# ---- a strict reader of the Prometheus text exposition format 0.0.4 ----
#
# Every line ends with LF; a line is "# HELP <name> <text>", "# TYPE <name>
# <type>" or a sample "<name>[{<label>="<value>",...}] <value>". A family's
# TYPE comes before its samples, which are contiguous; no series repeats;
# label values use only the escapes \\, \" and \n; histogram buckets are
# cumulative, in increasing le order, end with le="+Inf" equal to _count,
# and each series has one _sum. Dies with the line on any violation.
# Returns { families => { name => { type, help, samples => [...] } },
# order => [names] }; a sample is { name, labels => {..}, value }.

my $NAME_RE = qr/[a-zA-Z_:][a-zA-Z0-9_:]*/;
my $LABEL_RE = qr/[a-zA-Z_][a-zA-Z0-9_]*/;
my $VALUE_RE = qr/^(?:[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?Inf|NaN)$/;

sub prom_number
{
	my ($v) = @_;
	return 9**9**9 if $v eq '+Inf' || $v eq 'Inf';
	return -9**9**9 if $v eq '-Inf';
	return 9**9**9 - 9**9**9 if $v eq 'NaN';
	return $v + 0;
}

sub family_of
{
	my ($fams, $name) = @_;
	return $name if $fams->{$name} && $fams->{$name}{type} ne 'histogram';
	if ($name =~ /^(.*)_(bucket|sum|count)$/)
	{
		return $1 if $fams->{$1} && $fams->{$1}{type} eq 'histogram';
	}
	return undef;
}

sub parse_labels
{
	my ($text, $die) = @_;
	my %labels;
	pos($text) = 0;
	while (pos($text) < length $text)
	{
		$text =~ /\G($LABEL_RE)="/gc or $die->('bad label name');
		my $key = $1;
		my $value = '';
		while (1)
		{
			if ($text =~ /\G([^"\\]+)/gc) { $value .= $1; next }
			if ($text =~ /\G\\(["\\n])/gc) { $value .= $1 eq 'n' ? "\n" : $1; next }
			last if $text =~ /\G"/gc;
			$die->('bad escape or unterminated label value');
		}
		$die->("repeated label $key") if exists $labels{$key};
		$labels{$key} = $value;
		last if pos($text) == length $text;
		$text =~ /\G,/gc or $die->('expected , between labels');
	}
	return \%labels;
}

sub check_histogram
{
	my ($name, $fam) = @_;
	my %series;
	for my $s (@{ $fam->{samples} })
	{
		my %l = %{ $s->{labels} };
		my $le = delete $l{le};
		my $key = join("\x01", map { "$_=$l{$_}" } sort keys %l);
		my $sr = $series{$key} //= { buckets => [], sums => 0, counts => 0 };
		if ($s->{name} eq "${name}_bucket")
		{
			die "$name: bucket without le\n" unless defined $le;
			die "$name: bad le '$le'\n" unless $le =~ $VALUE_RE && $le ne 'NaN';
			push @{ $sr->{buckets} }, [ prom_number($le), $s->{value}, $le ];
		}
		else
		{
			die "$name: le on $s->{name}\n" if defined $le;
			$sr->{sums}++ if $s->{name} eq "${name}_sum";
			if ($s->{name} eq "${name}_count") { $sr->{counts}++; $sr->{count} = $s->{value} }
		}
	}
	for my $key (sort keys %series)
	{
		my $sr = $series{$key};
		die "$name\{$key}: needs one _sum and one _count\n" unless $sr->{sums} == 1 && $sr->{counts} == 1;
		my @b = @{ $sr->{buckets} };
		die "$name\{$key}: buckets must end with le=\"+Inf\"\n" unless @b && $b[-1][2] =~ /^\+?Inf$/;
		for my $i (1 .. $#b)
		{
			die "$name\{$key}: le not increasing at $b[$i][2]\n" unless $b[$i][0] > $b[ $i - 1 ][0];
			die "$name\{$key}: buckets not cumulative at le=$b[$i][2]\n" if $b[$i][1] < $b[ $i - 1 ][1];
		}
		die "$name\{$key}: +Inf bucket $b[-1][1] != _count $sr->{count}\n" unless $b[-1][1] == $sr->{count};
	}
	return;
}

sub parse_prometheus
{
	my ($text) = @_;
	my (%fams, @order, %seen, %closed);
	my $current = '';
	die "the document must end with a line feed\n" unless $text =~ /\n\z/;
	my $no = 0;
	for my $line (split /\n/, substr($text, 0, -1), -1)
	{
		$no++;
		my $die = sub { die "line $no: $_[0]: $line\n" };
		$die->('empty line') if $line eq '';
		$die->('CR, tab or control character') if $line =~ /[\x00-\x1f\x7f]/;
		if ($line =~ /^#/)
		{
			my ($kind, $name, $rest) = $line =~ /^# (HELP|TYPE) ($NAME_RE) (.+)$/
			  or $die->('unexpected comment');
			$die->('HELP/TYPE after the family\'s samples')
			  if $closed{$name} || ($fams{$name} && @{ $fams{$name}{samples} });
			$closed{$current} = 1 if $current ne '' && $current ne $name;
			$current = $name;
			push @order, $name unless $fams{$name};
			my $f = $fams{$name} //= { samples => [] };
			if ($kind eq 'HELP')
			{
				$die->('second HELP') if defined $f->{help};
				$f->{help} = $rest;
			}
			else
			{
				$die->('second TYPE') if defined $f->{type};
				$die->("unknown type $rest") unless $rest =~ /^(?:counter|gauge|histogram|summary|untyped)$/;
				$f->{type} = $rest;
			}
			next;
		}
		my ($name, $labels, $value) = $line =~ /^($NAME_RE)(?:\{(.*)\})? (\S+)$/
		  or $die->('not "name{labels} value"');
		$die->("bad value '$value'") unless $value =~ $VALUE_RE;
		my $l = parse_labels($labels // '', $die);
		my $fam = family_of(\%fams, $name);
		$die->('sample before its TYPE') unless defined $fam && defined $fams{$fam}{type};
		$die->('samples of a family must follow its TYPE without interruption')
		  if $fam ne $current || $closed{$fam};
		my $key = join("\x01", $name, map { "$_=$l->{$_}" } sort keys %$l);
		$die->('duplicate series') if $seen{$key}++;
		$die->('negative counter')
		  if ($fams{$fam}{type} eq 'counter' || $name =~ /_count$/) && prom_number($value) < 0;
		push @{ $fams{$fam}{samples} }, { name => $name, labels => $l, value => prom_number($value) };
	}
	for my $name (@order)
	{
		die "$name: HELP without TYPE\n" unless defined $fams{$name}{type};
		check_histogram($name, $fams{$name}) if $fams{$name}{type} eq 'histogram';
	}
	return { families => \%fams, order => \@order };
}

# prom_value returns the value of the one sample $name with exactly %labels.
sub prom_value
{
	my ($doc, $name, %labels) = @_;
	my $want = join("\x01", map { "$_=$labels{$_}" } sort keys %labels);
	for my $f (values %{ $doc->{families} })
	{
		for my $s (@{ $f->{samples} })
		{
			next unless $s->{name} eq $name;
			my $have = join("\x01", map { "$_=$s->{labels}{$_}" } sort keys %{ $s->{labels} });
			return $s->{value} if $have eq $want;
		}
	}
	return undef;
}

# The parser itself must refuse malformed documents, or passing it proves nothing.
for my $bad (
	"x 1\n",
	"# TYPE x gauge\nx 1",
	"# TYPE x gauge\nx{a=\"\\t\"} 1\n",
	"# TYPE x gauge\nx{a=\"1\"} 1\nx{a=\"1\"} 2\n",
	"# TYPE x gauge\n# TYPE y gauge\ny 1\nx 1\n",
	"# TYPE x gauge\nx  1\n",
	"# TYPE x gauge\n\nx 1\n",
	"# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
	"# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n")
{
	ok(!eval { parse_prometheus($bad); 1 }, 'the parser refuses ' . PgbusNode::sql_literal($bad));
}
is(prom_value(parse_prometheus(qq{# TYPE x gauge\nx{a="q\\"b\\\\c\\nd"} 5\n}), 'x', a => "q\"b\\c\nd"),
	5, 'the parser unescapes label values');

# ---- a node, a stream, the plain routes ----

my $pg = PgbusNode->new('metrics');
$pg->create_stream($STREAM);

sub http_get
{
	my ($path, %opt) = @_;
	my $c = $pg->sse($path, headers => { Accept => '*/*' }, %opt);
	$c->wait_closed(10);
	my @r = ($c->status, $c->header('content-type') // '', $c->body);
	$c->close;
	return @r;
}

sub metrics
{
	my ($st, $type, $body) = http_get('/metrics');
	die "GET /metrics: $st\n" unless $st == 200;
	return parse_prometheus($body);
}

sub stats_row
{
	my $r = $pg->safe_psql('postgres',
		"SELECT subscribers, emitted, queued, overflow_dropped, failed, newest_id, latency_p99_ms IS NOT NULL "
		  . "FROM pgbus_stream.stats() WHERE stream = '$STREAM'");
	my %h;
	@h{qw(subscribers emitted queued overflow_dropped failed newest_id has_p99)} = split /\|/, $r;
	return \%h;
}

# wait_for polls $cond for up to $timeout seconds; returns its last value.
sub wait_for
{
	my ($cond, $timeout) = @_;
	my $deadline = time + ($timeout // 10);
	while (1)
	{
		my $r = eval { $cond->() };
		return $r if $r || time > $deadline;
		sleep 0.05;
	}
}

my ($st, $type, $body) = http_get('/healthz');
is($st, 200, 'GET /healthz: 200');
like($body, qr/^ok\n?$/, 'GET /healthz: ok');
($st, $type, $body) = http_get('/metrics');
is($st, 200, 'GET /metrics: 200');
like($type, qr{^text/plain; ?version=0\.0\.4}, 'GET /metrics: content-type text/plain; version=0.0.4');
my $doc = eval { parse_prometheus($body) };
ok($doc, 'GET /metrics: valid text format 0.0.4') or diag($@ . "\n" . $body);
is(prom_value($doc, 'pgbus_stream_up', worker => 0), 1, 'pgbus_stream_up{worker="0"} 1');
for my $f (
	qw(pgbus_stream_connections pgbus_stream_queued_total pgbus_stream_stream_queued_total
	pgbus_stream_stream_subscribers pgbus_stream_commit_latency_seconds))
{
	ok($doc->{families}{$f}, "family $f is exposed");
}
($st, $type) = http_get('/metrics', method => 'POST', body => '');
is($st, 405, 'POST /metrics: 405');

# ---- M subscribers ----

my @subs = map { $pg->open_stream($STREAM) } 1 .. $M;
is(scalar(grep { $_->status == 200 && $_->event_count >= 1 } @subs), $M, "$M subscribers connected");
my $t0 = time;
my $rows = wait_for(
	sub {
		my $n = $pg->safe_psql('postgres',
			"SELECT count(*) FROM pgbus_stream.connections() WHERE streams = '$STREAM'");
		return $n == $M ? $n : 0;
	},
	5);
my $took = time - $t0;
is($rows, $M, "connections() shows the $M connections");
cmp_ok($took, '<=', 1.0, sprintf('... within a second (%.2f s)', $took));
is( $pg->safe_psql('postgres',
		"SELECT count(*) FROM pgbus_stream.connections() WHERE streams = '$STREAM' AND worker >= 0 "
		  . "AND remote_addr LIKE '127.0.0.1:%' AND connected_at <= now() AND cursor <> ''"),
	$M,
	'connections(): worker, remote address, start time and cursor filled in');
ok(wait_for(sub { stats_row()->{subscribers} == $M }), "stats(): subscribers = $M");

my $before = stats_row();
$doc = metrics();
my $w_before = prom_value($doc, 'pgbus_stream_queued_total', worker => 0);
my $single_worker = $pg->safe_psql('postgres', 'SELECT count(*) FROM pgbus_stream.workers()') == 1;
is(prom_value($doc, 'pgbus_stream_stream_queued_total', stream => $STREAM),
	$before->{queued}, '/metrics and stats() agree before the broadcasts');

# ---- N broadcasts ----

my $last_id;
$last_id = $pg->broadcast($STREAM, "m$_") for 1 .. $N;
is(scalar(grep { $_->wait_for_data_events($N, 10) } @subs), $M, "each subscriber got the $N broadcasts");
is(scalar(grep { scalar($_->data_events) == $N } @subs), $M, '... exactly once');

my $want = $before->{queued} + $N * $M;
ok(wait_for(sub { stats_row()->{queued} >= $want }), 'stats() queued caught up');
sleep 0.5;    # an over-count would show by now
my $after = stats_row();
is($after->{queued} - $before->{queued}, $N * $M, "stats(): queued grew by exactly N*M = @{[$N*$M]}");
is($after->{emitted} - $before->{emitted}, $N, "stats(): emitted grew by N = $N");
is($after->{newest_id}, $last_id, 'stats(): newest_id is the last msg_id');
is($after->{overflow_dropped} + $after->{failed}, 0, 'stats(): nothing dropped or failed');
is($after->{has_p99}, 't', 'stats(): a p99 latency');
is($pg->safe_psql('postgres',
		"SELECT delivered = queued AND dropped = retention_removed AND bytes_sent = bytes_queued "
		  . "FROM pgbus_stream.stats() WHERE stream = '$STREAM'"),
	't', "stats(): 0.2.0's delivered, dropped, bytes_sent equal queued, retention_removed, bytes_queued");
# Each connection wrote the N frames to its socket (connections() is refreshed
# about twice a second); 0.2.0's names show the same figures.
ok( wait_for(
		sub {
			$pg->safe_psql('postgres',
				"SELECT count(*) FROM pgbus_stream.connections() WHERE streams = '$STREAM' AND written >= $N "
				  . "AND overflow_dropped = 0 AND delivered = written AND dropped = overflow_dropped") == $M;
		}),
	"connections(): each of the $M connections wrote $N frames; delivered = written, dropped = overflow_dropped");

$doc = metrics();
is(prom_value($doc, 'pgbus_stream_stream_queued_total', stream => $STREAM),
	$after->{queued}, "/metrics pgbus_stream_stream_queued_total{stream=\"$STREAM\"} equals stats()");
is(prom_value($doc, 'pgbus_stream_stream_emitted_total', stream => $STREAM),
	$after->{emitted}, '/metrics emitted equals stats()');
is(prom_value($doc, 'pgbus_stream_stream_newest_id', stream => $STREAM), $last_id, '/metrics newest_id');
is(prom_value($doc, 'pgbus_stream_stream_subscribers', stream => $STREAM), $M, "/metrics subscribers = $M");
cmp_ok(prom_value($doc, 'pgbus_stream_stream_bytes_queued_total', stream => $STREAM),
	'>', 0, '/metrics bytes queued');
is(prom_value($doc, 'pgbus_stream_stream_delivered_total', stream => $STREAM),
	$after->{queued}, "/metrics: 0.2.0's pgbus_stream_stream_delivered_total (deprecated) equals queued");
is(prom_value($doc, 'pgbus_stream_stream_bytes_sent_total', stream => $STREAM),
	prom_value($doc, 'pgbus_stream_stream_bytes_queued_total', stream => $STREAM),
	"/metrics: 0.2.0's pgbus_stream_stream_bytes_sent_total (deprecated) equals bytes_queued");
is(prom_value($doc, 'pgbus_stream_delivered_total', worker => 0),
	prom_value($doc, 'pgbus_stream_queued_total', worker => 0),
	"/metrics: 0.2.0's pgbus_stream_delivered_total (deprecated) equals queued");
is(prom_value($doc, 'pgbus_stream_dropped_total', worker => 0),
	prom_value($doc, 'pgbus_stream_overflow_dropped_total', worker => 0),
	"/metrics: 0.2.0's pgbus_stream_dropped_total (deprecated) equals overflow_dropped");
my $count = prom_value($doc, 'pgbus_stream_commit_latency_seconds_count', stream => $STREAM);
ok($count >= 1 && $count <= $N, "/metrics latency histogram counts the broadcasts (1..$N: $count)");
ok(prom_value($doc, 'pgbus_stream_stream_horizon', stream => $STREAM) >= $last_id,
	'/metrics horizon reached the last msg_id');
SKIP:
{
	skip 'more than one worker: the worker counters are split', 1 unless $single_worker;
	is(prom_value($doc, 'pgbus_stream_queued_total', worker => 0) - $w_before,
		$N * $M, 'pgbus_stream_queued_total{worker="0"} grew by N*M');
}

($st, $type, $body) = http_get('/stats.json');
is($st, 200, 'GET /stats.json: 200');
like($type, qr{^application/json}, 'GET /stats.json: application/json');
my $json = eval { JSON::PP->new->decode($body) };
ok($json, 'GET /stats.json: valid JSON') or diag($@);
my ($js) = grep { $_->{name} eq $STREAM } @{ $json->{streams} // [] };
is($js && $js->{queued}, $after->{queued}, '/stats.json queued equals stats()');
is($json->{connections}, $M, "/stats.json connections = $M");
ok($js && defined $js->{latency_p99_ms}, '/stats.json p99 latency');

# ---- one subscriber leaves: the next N reach M-1 ----

(pop @subs)->close;
ok(wait_for(sub { stats_row()->{subscribers} == $M - 1 }), 'stats(): subscribers drop to M-1');
is( wait_for(
		sub {
			my $n = $pg->safe_psql('postgres',
				"SELECT count(*) FROM pgbus_stream.connections() WHERE streams = '$STREAM'");
			return $n == $M - 1 ? $n : 0;
		},
		5),
	$M - 1,
	'connections() drops the closed connection');
$pg->broadcast($STREAM, "again$_") for 1 .. $N;
is(scalar(grep { $_->wait_for_data_events(2 * $N, 10) } @subs), $M - 1, 'remaining subscribers got them');
ok(wait_for(sub { stats_row()->{queued} >= $after->{queued} + $N * ($M - 1) }), 'stats() caught up');
sleep 0.5;
my $final = stats_row();
is($final->{queued} - $after->{queued}, $N * ($M - 1), 'queued grew by exactly N*(M-1)');
is(prom_value(metrics(), 'pgbus_stream_stream_queued_total', stream => $STREAM),
	$final->{queued}, '/metrics still equals stats()');

$_->close for @subs;
$pg->finish;

# ---- two workers: every scrape shows the figures of both ----

# stream_linger short: a worker whose last connection on a stream closed
# lets go of the stream's entry within half a second (checked below).
$pg = PgbusNode->new('two_workers', conf => "pgbus_stream.workers = 2\npgbus_stream.stream_linger = 500ms\n");
is(scalar($pg->wait_workers(2)), 2, 'two workers run');
$pg->create_stream($STREAM);
my $M2 = 6;
@subs = map { $pg->open_stream($STREAM) } 1 .. $M2;
is(scalar(grep { $_->status == 200 && $_->event_count >= 1 } @subs), $M2, "$M2 subscribers connected");
$t0 = time;
my $per_worker = wait_for(
	sub {
		my $r = $pg->safe_psql('postgres',
			"SELECT count(*), string_agg(DISTINCT worker::text, ',') FROM pgbus_stream.connections() "
			  . "WHERE streams = '$STREAM'");
		return $r =~ /^$M2\|/ ? $r : 0;
	},
	5);
$took = time - $t0;
ok($per_worker, "connections() shows the $M2 connections of both workers");
cmp_ok($took, '<=', 1.0, sprintf('... within a second (%.2f s)', $took));
note("workers holding connections: " . (split /\|/, $per_worker // '|')[1]);
my $w_sum = sub { $pg->safe_psql('postgres', 'SELECT sum(queued) FROM pgbus_stream.workers()') };
$before = stats_row();
my $w_sum_before = $w_sum->();
$pg->broadcast($STREAM, "two$_") for 1 .. $N;
is(scalar(grep { $_->wait_for_data_events($N, 10) } @subs), $M2, "each subscriber got the $N broadcasts");
ok(wait_for(sub { stats_row()->{queued} >= $before->{queued} + $N * $M2 }), 'stats() caught up');
sleep 0.5;
$after = stats_row();
is($after->{queued} - $before->{queued}, $N * $M2, "two workers: queued grew by exactly N*M = @{[$N*$M2]}");
is($w_sum->() - $w_sum_before, $N * $M2, 'two workers: workers() queued grew by N*M in total');
is($pg->safe_psql('postgres', 'SELECT count(*) FILTER (WHERE delivered = queued) FROM pgbus_stream.workers()'),
	2, "workers(): 0.2.0's delivered equals queued on both workers");
my %answered;
for my $i (1 .. 8)
{
	my $d = metrics();
	my ($w) = map { $_->{labels}{worker} } @{ $d->{families}{pgbus_stream_up}{samples} };
	$answered{$w}++;
	is(prom_value($d, 'pgbus_stream_stream_queued_total', stream => $STREAM),
		$after->{queued}, "scrape $i (worker $w): stream queued equals stats()");
	is(prom_value($d, 'pgbus_stream_connections'), $M2, "scrape $i (worker $w): connections of both workers");
}
note('scrapes answered by worker(s) ' . join(', ', map { "$_ x$answered{$_}" } sort keys %answered));

# A scrape goes to whichever worker accepts it, also one with no connection
# on the stream (which holds no entry for it): the stream's figures are
# still those of all workers. Worker X is the one with fewer connections;
# its connections close, and once it has let go of the stream's entry,
# scrapes run until X answers one.
my %worker_of = map { split /\|/ } split /\n/,
  $pg->safe_psql('postgres', "SELECT split_part(remote_addr, ':', 2), worker FROM pgbus_stream.connections() "
	  . "WHERE streams = '$STREAM'");
my %count = (0 => 0, 1 => 0);
$count{ $worker_of{ $_->{sock}->sockport } // '' }++ for @subs;
my $x = $count{0} <= $count{1} ? 0 : 1;
my @x_subs = grep { ($worker_of{ $_->{sock}->sockport } // -1) == $x } @subs;
@subs = grep { ($worker_of{ $_->{sock}->sockport } // -1) != $x } @subs;
$_->close for @x_subs;
note(sprintf('worker %d: %d connection(s) closed, %d left on worker %d', $x, scalar @x_subs, scalar @subs, 1 - $x));
ok( wait_for(
		sub {
			$pg->safe_psql('postgres', "SELECT streams FROM pgbus_stream.workers() WHERE worker = $x") eq '0';
		},
		10),
	"worker $x holds no stream entry once its connections are gone");
my $x_doc;
for (1 .. 60)
{
	my $d = metrics();
	my ($w) = map { $_->{labels}{worker} } @{ $d->{families}{pgbus_stream_up}{samples} };
	if ($w == $x)
	{
		$x_doc = $d;
		last;
	}
}
ok($x_doc, "worker $x answered one of at most 60 scrapes");
is($x_doc && prom_value($x_doc, 'pgbus_stream_stream_queued_total', stream => $STREAM),
	$after->{queued}, "scrape of worker $x, with no connection on the stream: queued equals stats()");
is($x_doc && prom_value($x_doc, 'pgbus_stream_stream_emitted_total', stream => $STREAM),
	stats_row()->{emitted}, "... and emitted too");

$_->close for @subs;
$pg->finish;
done_testing();
