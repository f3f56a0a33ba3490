# 003_concurrency: concurrent producers committing out of msg_id order.
#
# A. Four sessions take msg_ids in turn and commit in a shuffled order, 25
#    rounds, while a fifth "slow" transaction holds the lowest msg_id of all
#    until the end. Live subscribers get all 100 + 1 exactly once; a client
#    that reconnects with a cursor taken half-way still gets the slow one
#    (a cursor-by-max-msg_id streamer would skip it forever). Live frames
#    come in commit order (known: the test commits one at a time), replays
#    in msg_id order.
# B. Four psql processes broadcast 25 messages each at the same time.
#    Every one of the 100 arrives exactly once, live (each producer's in its
#    commit order) and on replay (msg_id order).
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use PgbusNode qw(parse_token token_covers token_le frames_ok ids_ok);

my $pg = PgbusNode->new('conc');
$pg->create_stream('conc');

# msg_id of every message, by its data, read from the queue table.
sub ids_by_data
{
	my $rows = $pg->safe_psql('postgres',
		q{SELECT msg_id, message->>'html' FROM pgbus_stream.q_pgbus_conc ORDER BY msg_id});
	return map { my ($id, $d) = split /\|/, $_, 2; ($d => $id) } split /\n/, $rows;
}

# in_order: the frames are exactly the messages @$want, in that order, with
# ids that grow and cover their own msg_ids.
sub in_order
{
	my ($frames, $want, $since, $name) = @_;
	my %id = ids_by_data();
	return frames_ok($frames, [ map { [ $id{$_} // -1, $_ ] } @$want ], $since, $name);
}

# exactly_once: the frames carry exactly the data in @$want, each once, in
# an order that keeps every producer's own commit order (data "b<p>-<i>": i
# grows per producer p), with ids that grow and cover their own msg_ids.
sub exactly_once
{
	my ($frames, $want, $since, $name) = @_;
	my %count;
	$count{ $_->{data} // '' }++ for @$frames;
	my @dups = grep { $count{$_} > 1 } sort keys %count;
	my %want = map { $_ => 1 } @$want;
	my @missing = grep { !$count{$_} } @$want;
	my @extra = grep { !$want{$_} } sort keys %count;
	is(scalar @$frames, scalar @$want, "$name: " . scalar(@$want) . ' frames');
	ok(!@dups, "$name: no duplicate") or diag("duplicates: @dups");
	ok(!@missing, "$name: none missing") or diag("missing: @missing");
	ok(!@extra, "$name: nothing unexpected") or diag("unexpected: @extra");
	my (%last, @disorder);
	for my $d (map { $_->{data} // '' } @$frames)
	{
		my ($p, $i) = $d =~ /^(\w+)-(\d+)$/ or next;
		push @disorder, $d if defined $last{$p} && $i <= $last{$p};
		$last{$p} = $i;
	}
	ok(!@disorder, "$name: each producer's messages in its commit order") or diag("out of order: @disorder");
	my %id = ids_by_data();
	ids_ok($frames, [ map { $id{ $_->{data} // '' } // -1 } @$frames ], $since, $name);
}

# ---------------------------------------------------------------- A
my $live = $pg->open_stream('conc');
is($live->status, 200, 'live subscriber connected');
my ($W) = $live->body =~ /since_id=(\S+)/;

my $slow = $pg->background_psql('postgres');
$slow->query_safe('BEGIN');
my $slow_id = $slow->query_safe(q{SELECT pgbus_stream.broadcast('conc', 'slow')});
like($slow_id, qr/^\d+$/, "slow transaction holds msg_id $slow_id");

my @s = map { $pg->background_psql('postgres') } 1 .. 4;
my @orders = ([ 3, 1, 2, 0 ], [ 1, 3, 0, 2 ], [ 2, 0, 3, 1 ], [ 0, 2, 1, 3 ], [ 3, 2, 1, 0 ]);
my (@want_a, @commit_order_a);
my $mid_token;
for my $r (1 .. 25)
{
	for my $i (0 .. 3)
	{
		$s[$i]->query_safe('BEGIN');
		$s[$i]->query_safe("SELECT pgbus_stream.broadcast('conc', 'a$i-$r')");
		push @want_a, "a$i-$r";
	}
	for my $i (@{ $orders[ $r % @orders ] })
	{
		$s[$i]->query_safe('COMMIT');
		push @commit_order_a, "a$i-$r";
	}
	if ($r == 12)
	{
		# a cursor taken half-way, while the slow transaction is in flight
		$live->wait_for_data_events(48, 10);
		$mid_token = ($live->data_events)[-1]{id};
	}
}
ok($live->wait_for_data_events(100, 20), 'A: the 100 shuffled commits arrive live');
$live->poll(0.5);
my @before_slow = $live->data_events;
ok(!grep({ $_->{data} eq 'slow' } @before_slow), 'A: the uncommitted slow message is not sent');
ok(!token_covers($before_slow[-1]{id}, $slow_id),
	'A: while the slow transaction is in flight, no id covers its msg_id')
  or diag("last id: $before_slow[-1]{id}, slow msg_id: $slow_id");

$slow->query_safe('COMMIT');
ok($live->wait_for_data_events(101, 10), 'A: the slow message arrives once committed');
$live->poll(0.5);
my @live_a = $live->data_events;
is($live_a[-1]{data}, 'slow', 'A: it arrives last (commit order)');
in_order(\@live_a, [ @commit_order_a, 'slow' ], $W, 'A live, in commit order');

ok(defined $mid_token, "A: cursor taken half-way ($mid_token)");
my $re = $pg->open_stream('conc', headers => { 'Last-Event-ID' => $mid_token });
my %idmap = ids_by_data();
my @after_mid = grep { !token_covers($mid_token, $idmap{$_}) } (@want_a, 'slow');
ok(grep({ $_ eq 'slow' } @after_mid), 'A: the half-way cursor does not cover the slow message');
ok($re->wait_for_data_events(scalar @after_mid, 20), 'A: reconnect with the half-way cursor');
$re->poll(0.5);
# A replay reads the table: msg_id order.
in_order([ $re->data_events ], [ sort { $idmap{$a} <=> $idmap{$b} } @after_mid ],
	$mid_token, 'A reconnect, in msg_id order');
$re->close;
$_->quit for @s, $slow;

# ---------------------------------------------------------------- B
my $before_b = ($live->data_events)[-1]{id};
my $connstr = $pg->connstr('postgres');
my $dir = PostgreSQL::Test::Utils::tempdir();
my (@h, @out, @err, @want_b);
for my $p (1 .. 4)
{
	my $file = "$dir/producer$p.sql";
	open my $fh, '>', $file or die "$file: $!";
	for my $i (1 .. 25)
	{
		print $fh "SELECT pgbus_stream.broadcast('conc', 'b$p-$i');\n";
		push @want_b, "b$p-$i";
	}
	close $fh;
}
for my $p (1 .. 4)
{
	push @h,
	  IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $connstr, '-f', "$dir/producer$p.sql" ],
		'>', \$out[$p], '2>', \$err[$p], IPC::Run::timeout(120));
}
for my $p (1 .. 4)
{
	my $ok = eval { $h[ $p - 1 ]->finish };
	ok($ok, "B: producer $p finished") or diag($@ // '', $err[$p] // '');
}
ok($live->wait_for_data_events(201, 20), 'B: the 100 concurrent broadcasts arrive live');
$live->poll(0.5);
my @live_b = ($live->data_events)[ 101 .. scalar($live->data_events) - 1 ];
exactly_once(\@live_b, \@want_b, $before_b, 'B live');

# Replay of everything from the position before A, on a fresh connection.
my $all = $pg->open_stream('conc', query => "since=$W");
ok($all->wait_for_data_events(201, 20), 'replay of A and B from the start');
$all->poll(0.5);
%idmap = ids_by_data();
in_order([ $all->data_events ], [ sort { $idmap{$a} <=> $idmap{$b} } @want_a, 'slow', @want_b ],
	$W, 'full replay, in msg_id order');
$all->close;
$live->close;

$pg->finish;
done_testing();
