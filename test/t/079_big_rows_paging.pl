# 079_big_rows_paging: a replay of large rows reads each row at most twice
# per connection (not once per page), whatever the queue bounds.
#
# A public stream holds 120 rows of 200 kB (24 MB, far more than the 1 MB a
# connection may queue). Three clients ask for ?replay=all at once and read
# everything: each gets every row, in order, once. The rows the worker read
# from the queue table meanwhile (pgbus_stream_rows_read_total, /metrics)
# are at most two reads per row and connection (a page takes what the
# queue has room for; only the row that crossed it is read again), plus a
# little for what the worker read on its own. Reading a page of up to replay_page_size
# rows and keeping only what fits the queue re-read the rest every time the
# socket drained: thousands of reads, and CPU spent on rows not sent.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use HTTP::Tiny;
use PgbusNode;

$SIG{PIPE} = 'IGNORE';

my $ROWS = 120;
my $SIZE = 200_000;
my $CLIENTS = 3;

my $pg = PgbusNode->new('bigpage', conf => "pgbus_stream.workers = 1\n");
$pg->create_stream('big');
my ($qs, $qt) = split /\|/,
  $pg->safe_psql('postgres', "SELECT queue_schema, queue_table FROM pgbus_stream.streams WHERE name = 'big'");
$pg->safe_psql('postgres',
	qq{INSERT INTO "$qs"."$qt" (message) SELECT jsonb_build_object('html', 'row ' || i || ' ' || repeat(md5(i::text), $SIZE / 32)) FROM generate_series(1, $ROWS) i});

sub rows_read
{
	my $r = HTTP::Tiny->new(timeout => 10)->get('http://127.0.0.1:' . $pg->http_port . '/metrics');
	return undef unless $r->{success};
	my ($v) = $r->{content} =~ /^pgbus_stream_rows_read_total\{[^}]*\}\s+(\d+)/m;
	return $v;
}

my $before = rows_read();
ok(defined $before, "/metrics has pgbus_stream_rows_read_total") or diag('no such counter');
$before //= 0;

my @c = map { $pg->sse('/streams/big?replay=all', timeout => 30) } 1 .. $CLIENTS;
is($_->status, 200, 'replay=all: 200') for @c;

my @next = (1) x $CLIENTS;
my @bad;
my $deadline = time + 240;
while (time < $deadline && grep { $_ <= $ROWS } @next)
{
	for my $i (0 .. $#c)
	{
		next if $next[$i] > $ROWS;
		$c[$i]->poll(0.05);
		for my $f ($c[$i]->take_events)
		{
			next unless defined $f->{id};
			my ($n) = ($f->{data} // '') =~ /^row (\d+) /;
			$bad[$i] //= "client $i: expected row $next[$i], got " . substr($f->{data} // 'undef', 0, 20)
			  unless defined $n && $n == $next[$i];
			$next[$i]++;
		}
		$c[$i]->forget_taken;
	}
}
for my $i (0 .. $#c)
{
	is($next[$i] - 1, $ROWS, "client $i got every row");
	ok(!defined $bad[$i], "client $i: in order, each once") or diag($bad[$i]);
}
my $read = (rows_read() // 0) - $before;
note("rows read from the table during the replays: $read");
cmp_ok($read, '<=', 2 * $CLIENTS * $ROWS + 20,
	"each row read at most twice per connection ($read reads for $CLIENTS x $ROWS rows)");
$_->close for @c;

$pg->finish;
done_testing();
