# 002_replay: reconnecting with a cursor gets exactly what was missed.
# Last-Event-ID and ?since (token or plain integer), Last-Event-ID winning,
# the "page born stale" case, nothing new, a backlog of several read pages,
# rolled-back ids inside the backlog, and a hand-made token with ranges.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use PgbusNode qw(parse_token token_covers token_le frames_ok sql_literal);

# Small replay pages so that a modest backlog spans several of them.
my $pg = PgbusNode->new('replay', conf => "pgbus_stream.replay_page_size = 10\n");
$pg->create_stream('news');

my $since_re = qr/^: pgbus stream open since_id=(\S+) stream=news$/m;

sub since_of { my ($c) = @_; my ($s) = $c->body =~ $since_re; return $s }

sub msg
{
	my ($data, $event) = @_;
	return [ $pg->broadcast('news', $data, $event), $data, $event ];
}

# ---- before the first broadcast ----
my $c = $pg->open_stream('news');
is($c->status, 200, 'fresh stream: 200');
my $W = since_of($c);
my $pw = parse_token($W);
ok($pw, "fresh stream: since_id is a token ($W)");
is($pw && $pw->{horizon}, 0, 'fresh stream: position 0');
is_deeply($pw && $pw->{ranges}, [], 'fresh stream: nothing above the horizon');
$c->poll(1);
is(scalar $c->data_events, 0, 'fresh stream: empty replay');
$c->close;

# ---- page born stale: the page noted W, then A and B were broadcast ----
my @m;
push @m, msg('A'), msg('B');
$c = $pg->open_stream('news', query => "since=$W");
is($c->status, 200, '?since=W: 200');
ok($c->wait_for_data_events(2, 10), '?since=W: backlog arrives');
$c->poll(0.5);
frames_ok([ $c->data_events ], [ @m[0, 1] ], $W, '?since=W');
push @m, msg('C live', 'custom');
ok($c->wait_for_data_events(3, 10), 'live broadcast after the backlog arrives');
frames_ok([ $c->data_events ], [ @m[0 .. 2] ], $W, 'backlog then live');
my @ids = map { $_->{id} } $c->data_events;
$c->close;

# ---- reconnect with Last-Event-ID ----
push @m, msg('D'), msg("E\nwith two lines");
$c = $pg->open_stream('news', headers => { 'Last-Event-ID' => $ids[2] });
is($c->status, 200, 'Last-Event-ID: 200');
my $s = since_of($c);
ok(defined $s && token_le($s, $ids[2]) && token_le($ids[2], $s),
	'Last-Event-ID: since_id is the cursor sent');
ok($c->wait_for_data_events(2, 10), 'Last-Event-ID: missed messages arrive');
$c->poll(1);
frames_ok([ $c->data_events ], [ @m[3, 4] ], $ids[2], 'Last-Event-ID');
push @ids, map { $_->{id} } $c->data_events;
$c->close;

# ---- nothing new ----
$c = $pg->open_stream('news', headers => { 'Last-Event-ID' => $ids[-1] });
is($c->status, 200, 'nothing new: 200');
$c->poll(1.5);
is(scalar $c->data_events, 0, 'nothing new: no events');
$c->close;

# ---- Last-Event-ID wins over ?since ----
$c = $pg->open_stream('news', query => "since=$W", headers => { 'Last-Event-ID' => $ids[2] });
ok($c->wait_for_data_events(2, 10), 'Last-Event-ID and ?since: events arrive');
$c->poll(1);
frames_ok([ $c->data_events ], [ @m[3, 4] ], $ids[2], 'Last-Event-ID wins over ?since');
$c->close;

# ---- ?last_event_id= (what some clients send) ----
$c = $pg->open_stream('news', query => "last_event_id=$ids[3]");
is($c->status, 200, '?last_event_id: 200');
ok($c->wait_for_data_events(1, 10), '?last_event_id: events arrive');
$c->poll(1);
frames_ok([ $c->data_events ], [ $m[4] ], $ids[3], '?last_event_id');
$c->close;

# ---- a plain integer means "after msg_id N" ----
$c = $pg->open_stream('news', query => "since=$m[1][0]");
is($c->status, 200, 'plain integer ?since: 200');
ok($c->wait_for_data_events(3, 10), 'plain integer ?since: events arrive');
$c->poll(1);
frames_ok([ $c->data_events ], [ @m[2 .. 4] ], undef, "?since=$m[1][0] (plain integer)");
$c->close;
$c = $pg->open_stream('news', headers => { 'Last-Event-ID' => $m[3][0] });
ok($c->wait_for_data_events(1, 10), 'plain integer Last-Event-ID: events arrive');
$c->poll(1);
frames_ok([ $c->data_events ], [ $m[4] ], undef, "Last-Event-ID: $m[3][0] (plain integer)");
$c->close;

# ---- a backlog of several read pages, with rolled-back ids inside ----
my $mark = $ids[-1];
my @backlog;
my $sql = '';
for my $i (1 .. 37)
{
	my $d = "backlog $i";
	if ($i % 9 == 0)
	{
		# rolled back: takes a msg_id, never visible
		$sql .= "BEGIN;\n" . PgbusNode::broadcast_sql('news', "$d rolled back") . ";\nROLLBACK;\n";
	}
	$sql .= PgbusNode::broadcast_sql('news', $d) . ";\n";
	push @backlog, $d;
}
# ten more in one transaction
$sql .= "BEGIN;\n";
for my $i (38 .. 47)
{
	$sql .= PgbusNode::broadcast_sql('news', "backlog $i") . ";\n";
	push @backlog, "backlog $i";
}
$sql .= "COMMIT;\n";
$pg->safe_psql('postgres', $sql);
my $rows = $pg->safe_psql('postgres',
	q{SELECT msg_id, message->>'html' FROM pgbus_stream.q_pgbus_news
	  WHERE message->>'html' LIKE 'backlog %' ORDER BY msg_id});
my @exp = map { [ split /\|/, $_, 2 ] } split /\n/, $rows;
is_deeply([ map { $_->[1] } @exp ], \@backlog, 'backlog rows are in the queue (no rolled-back row)');

$c = $pg->open_stream('news', headers => { 'Last-Event-ID' => $mark });
ok($c->wait_for_data_events(scalar @exp, 20), 'backlog of ' . scalar(@exp) . ' messages arrives');
$c->poll(1);
frames_ok([ $c->data_events ], \@exp, $mark, 'multi-page backlog');
my $end = ($c->data_events)[-1]{id};
ok(!grep({ $_->{data} =~ /rolled back/ } $c->data_events), 'no rolled-back message in the backlog');
$c->close;

# ---- a token with ranges: ids above the horizon that were already seen ----
# Take the backlog's msg_ids b0 < b1 < ... ; the token "<epoch>~b2_b4.b6-b7"
# says: everything up to b2, plus b4, b6 and b7 were seen.
my $epoch = parse_token($end)->{epoch};
my @b = map { $_->[0] } @exp;
my $prefix = $epoch ? "$epoch~" : '';
my $tok = "$prefix$b[2]_$b[4].$b[6]-$b[7]";
SKIP:
{
	skip 'backlog msg_ids are not consecutive where the token needs it', 3
	  unless $b[7] == $b[6] + 1 && $b[4] > $b[2] + 1 && $b[6] > $b[4] + 1;
	$c = $pg->open_stream('news', query => "since=$tok");
	is($c->status, 200, "token with ranges ($tok): 200");
	my @want = grep { !token_covers($tok, $_->[0]) } @exp;
	ok($c->wait_for_data_events(scalar @want, 20), 'token with ranges: events arrive');
	$c->poll(1);
	frames_ok([ $c->data_events ], \@want, $tok, "token with ranges ($tok)");
	$c->close;
}

# ---- the last id after all that: nothing new ----
$c = $pg->open_stream('news', query => "since=$end");
$c->poll(1.5);
is(scalar $c->data_events, 0, 'reconnect with the very last id: nothing');
$c->close;

# ---- no cursor: a new connection starts from now ----
$c = $pg->open_stream('news');
$c->poll(1);
is(scalar $c->data_events, 0, 'no cursor: no backlog');
my $final = msg('final');
ok($c->wait_for_data_events(1, 10), 'no cursor: live messages arrive');
frames_ok([ $c->data_events ], [$final], undef, 'no cursor');
$c->close;

$pg->finish;
done_testing();
