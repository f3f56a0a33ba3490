# 084_big_rows_memory: the worker's memory follows the size of one row, not
# the copies made of it, nor the number of subscribers.
#
#  A. One 24 MB message to 20 subscribers: the worker's peak memory (VmHWM,
#     reset before; shared pages it touched included, shared buffers kept at
#     16 MB) rises by less than 4 times the payload. Each subscriber gets
#     the one encoded body. Reading the message with an expression per
#     envelope field detoasted the message once per operator (about ten
#     copies held at once), then copied it through the SPI tuple, the C++
#     row and the body: 11 times the payload.
#  B. Five 8 MB rows in one transaction to 20 new subscribers: the peak
#     rises by less than 8 times one row: each row once, however many
#     subscribers page it (the connections that page a row from the table
#     share one body instead of encoding a copy each; subscribers reading at
#     different speeds may hold all five at once), plus one row being read
#     (held twice while it is converted) and one being encoded. Each read
#     holds one such row (replay_page_bytes). Before: 32 times one row (22
#     with the read's copies gone: a body per subscriber that paged it).
#  C. The message's fields read as ->> reads them (non-string members,
#     null, scalars, arrays), the same whether the payload came through
#     shared memory (a live subscriber) or was read back from the table (a
#     replay; memory_retention = 0, so no tail).
#
# The clients of A and B read with HTTP/1.0 (raw bytes, no chunks) and only count what
# arrives, so they stay small however large the rows are.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use IO::Select;
use IO::Socket::IP;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode qw(frames_ok);

$SIG{PIPE} = 'IGNORE';

my $SUBS = 20;
my $MB = 1024 * 1024;
my $pg = PgbusNode->new('bigmem',
	conf => "pgbus_stream.workers = 1\nshared_buffers = 16MB\npgbus_stream.memory_retention = 0\n");
$pg->create_stream('big');
my ($worker) = $pg->worker_pids;
ok($worker, "worker pid $worker");

sub status_kb
{
	my %v;
	open my $fh, '<', "/proc/$worker/status" or return {};
	while (<$fh>) { $v{$1} = $2 if /^(VmRSS|VmHWM):\s+(\d+) kB/ }
	close $fh;
	return \%v;
}

# clear_refs 5 resets VmHWM to the current RSS (the server runs as the
# test's user).
sub reset_peak
{
	my $cr;
	return open($cr, '>', "/proc/$worker/clear_refs") && print($cr "5\n") && close($cr);
}

# A subscriber that counts the data frames ("\nid: ") and the payload ends
# ("|end|") it receives, and keeps nothing else.
sub subscribe
{
	my $s = IO::Socket::IP->new(PeerHost => '127.0.0.1', PeerPort => $pg->http_port, Proto => 'tcp')
	  or die "connect: $@";
	$s->blocking(0);
	syswrite($s, "GET /streams/big HTTP/1.0\r\nAccept: text/event-stream\r\n\r\n");
	return { sock => $s, head => '', body => 0, carry => '', pre => '', frames => 0, ends => 0, open => 0 };
}

sub read_some
{
	my ($c) = @_;
	while (1)
	{
		my $n = sysread($c->{sock}, my $buf, 1 << 20);
		return if !defined $n || $n == 0;
		if (!$c->{body})
		{
			$c->{head} .= $buf;
			my $at = index($c->{head}, "\r\n\r\n");
			next if $at < 0;
			$c->{status} = $c->{head} =~ m{^HTTP/1\.\d (\d+)} ? $1 : 0;
			$buf = substr($c->{head}, $at + 4);
			$c->{body} = 1;
		}
		if (!$c->{open})
		{
			# The preamble (its lone id line is no data frame) is not
			# counted; the rows come after it.
			$c->{pre} .= $buf;
			$c->{open} = index($c->{pre}, 'pgbus:connected') >= 0;
			$c->{carry} = substr($c->{pre}, -5);
			next;
		}
		my $text = $c->{carry} . $buf;
		$c->{frames}++ while $text =~ /\nid: /g;
		$c->{ends}++ while $text =~ /\|end\|\n/g;
		# a marker split between reads (too short to hold a whole one: none
		# is counted twice)
		$c->{carry} = length($text) > 5 ? substr($text, -5) : $text;
	}
}

# Reads from every client until each has $rows frames and payload ends (or
# two minutes passed).
sub read_all
{
	my ($clients, $rows) = @_;
	my $sel = IO::Select->new(map { $_->{sock} } @$clients);
	my %by = map { (fileno($_->{sock}) => $_) } @$clients;
	my $deadline = time + 120;
	while (time < $deadline && grep { $_->{frames} < $rows || $_->{ends} < $rows } @$clients)
	{
		read_some($by{ fileno($_) }) for $sel->can_read(0.2);
	}
	my @bad = grep { $_->{frames} != $rows || $_->{ends} != $rows } @$clients;
	diag("a client got $_->{frames} frames and $_->{ends} payload ends") for @bad;
	return @$clients - @bad;
}

# Sends $sql's rows to $SUBS fresh subscribers; returns the worker's peak
# growth in kB once every subscriber has every row.
sub measure
{
	my ($label, $sql, $rows) = @_;
	my @c = map { subscribe() } 1 .. $SUBS;
	my $deadline = time + 30;
	while (time < $deadline && grep { !$_->{open} } @c)
	{
		read_some($_) for @c;
		sleep 0.05;
	}
	is(scalar(grep { $_->{open} && $_->{status} == 200 } @c), $SUBS, "$label: $SUBS subscribers connected");
	sleep 0.5;
	ok(reset_peak(), "$label: peak reset");
	my $before = status_kb();
	$pg->safe_psql('postgres', $sql);
	is(read_all(\@c, $rows), $SUBS, "$label: every subscriber got all $rows rows, whole");
	my $after = status_kb();
	close $_->{sock} for @c;
	my $growth = $after->{VmHWM} - $before->{VmRSS};
	note(sprintf('%s: VmRSS before %d kB, peak after %d kB: +%.1f MB', $label,
			$before->{VmRSS}, $after->{VmHWM}, $growth / 1024));
	return $growth;
}

# md5 hex repeated: the queue stores it compressed; the worker holds it whole.
sub payload_sql
{
	my ($tag, $mb) = @_;
	return "'$tag:' || repeat(md5(${tag}::text), $mb * $MB / 32) || '|end|'";
}

my $g = measure('one 24 MB message',
	'SELECT pgbus_stream.broadcast(\'big\', ' . payload_sql(1, 24) . ')', 1);
cmp_ok($g, '<', 4 * 24 * 1024,
	sprintf('24 MB to %d subscribers: peak +%.1f MB (%.1f times the row; bound 4)', $SUBS, $g / 1024, $g / 1024 / 24));

$g = measure('five 8 MB rows in one transaction',
	'SELECT pgbus_stream.broadcast(\'big\', ' . payload_sql('i', 8) . ') FROM generate_series(1, 5) i', 5);
cmp_ok($g, '<', 8 * 8 * 1024,
	sprintf('5 x 8 MB in one transaction: peak +%.1f MB (%.1f times one row; bound 8)', $g / 1024, $g / 1024 / 8));

# C. Messages of every shape, as the worker renders them (its event name
# when valid, else the default), against the SQL operators' reading.
$pg->create_stream('shapes');
my ($qs, $qt) = split /\|/,
  $pg->safe_psql('postgres', "SELECT queue_schema, queue_table FROM pgbus_stream.streams WHERE name = 'shapes'");
my $live = $pg->open_stream('shapes');
my ($since) = $live->body =~ /since_id=(\S+)/;
$pg->safe_psql('postgres', qq{INSERT INTO "$qs"."$qt" (vt, message) VALUES
  (now(), '{"html": {"a": [1, 2]}, "event": 5}'), (now(), '{"html": 12.50}'),
  (now(), '{"html": true, "event": "x:y"}'), (now(), '{"html": null, "event": null}'),
  (now(), '"just text"'), (now(), '[1, {"b": null}]'), (now(), '{"v": 2, "event": false}'),
  (now(), '{"html": "plain", "visible_to": null, "exclude": 7}'), (now(), '{"html": "a\\nb"}')});
my $rows = $pg->safe_psql('postgres', qq{
SELECT msg_id,
       coalesce(CASE WHEN jsonb_typeof(message) = 'object' THEN message->>'event' END, 'turbo-stream'),
       CASE WHEN jsonb_typeof(message) = 'object' AND message ? 'html' THEN message->>'html'
            ELSE message::text END
FROM "$qs"."$qt" ORDER BY msg_id});
my @want = map { my ($id, $ev, $d) = split /\|/, $_, 3; [ $id, $d, $ev ] } split /\n(?=\d+\|)/, $rows;
is(scalar @want, 9, 'nine messages of different shapes');
ok($live->wait_for_data_events(9, 15), 'live: every message arrives');
frames_ok([ $live->data_events ], \@want, $since, 'live (payloads through shared memory)');
my $replay = $pg->sse('/streams/shapes?replay=all');
ok($replay->wait_for_data_events(9, 15), 'replay: every message arrives');
frames_ok([ $replay->data_events ], \@want, undef, 'replay (messages read from the table)');
$_->close for $live, $replay;

$pg->finish;
done_testing();
