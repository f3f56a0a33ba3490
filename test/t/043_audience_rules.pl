# 043_audience_rules: an audience admits a connection only when its rule
# yields true for the connection's context (issue 26, point 7).
#
# Both rule forms, each with a context that matches and one that does not:
# a predicate ('$.role == "admin"'), which jsonb_path_exists took as a match
# whatever it evaluated to (false is a result), and a filter path
# ('$.role ? (@ == "admin")'). A predicate that is unknown for a context
# (a type mismatch), a path that selects only false, and rules that raise
# (strict mode on a missing key, arithmetic on a string) hide the message,
# and a raising rule is logged. Live and replayed from the table alike.
use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../lib";

use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use PgbusNode;

my $pg = PgbusNode->new('audrules', conf => "pgbus_stream.jwt_secret = 'audrules-secret'\n");
$pg->create_stream('room', public => 0);
$pg->safe_psql(
	'postgres', q{
SELECT pgbus_stream.define_audience('pred_admin', '$.role == "admin"');
SELECT pgbus_stream.define_audience('path_admin', '$.role ? (@ == "admin")');
SELECT pgbus_stream.define_audience('pred_level', '$.level >= 5');
SELECT pgbus_stream.define_audience('path_flag', '$.flag');
SELECT pgbus_stream.define_audience('err_strict', 'strict $.missing');
SELECT pgbus_stream.define_audience('err_arith', '$.role * 2 == 4');
SELECT pgbus_stream.define_audience('err_path_arith', '$.role * 2');
});

sub token
{
	my ($ctx) = @_;
	return $pg->safe_psql('postgres', "SELECT pgbus_stream.sign_token(ARRAY['room'], '1 hour', NULL, '$ctx')");
}
my %tok = (
	admin => token('{"role":"admin","level":7,"flag":true}'),
	viewer => token('{"role":"viewer","level":"high","flag":false}'),
);

# Each message names its audience; "end" closes a round.
my @round = (
	[ 'public', undef ],
	[ 'pred admin', 'pred_admin' ],
	[ 'path admin', 'path_admin' ],
	[ 'pred level', 'pred_level' ],
	[ 'path flag', 'path_flag' ],
	[ 'err strict', 'err_strict' ],
	[ 'err arith', 'err_arith' ],
	[ 'err path arith', 'err_path_arith' ],
	[ 'end', undef ]);
my %expect = (
	# matching context: both forms admit
	admin => 'public|pred admin|path admin|pred level|path flag|end',
	# non-matching context: a predicate's false, an unknown comparison
	# (level is a string) and a path selecting only false admit no one
	viewer => 'public|end',
);

sub connect_as
{
	my ($who, $query) = @_;
	my $c = $pg->sse('/streams/room' . ($query // ''), headers => { Authorization => "Bearer $tok{$who}" });
	is($c->status, 200, "$who connects");
	$c->wait_for_events(1, 10);
	return $c;
}

sub datas { return join('|', map { $_->{data} } $_[0]->data_events) }

sub wait_end
{
	my ($c) = @_;
	$c->wait_until(sub { grep { $_->{data} eq 'end' } $_[0]->data_events }, 10);
}

my %live = map { $_ => connect_as($_) } keys %expect;
my $first;
for my $m (@round)
{
	my $id = $pg->broadcast('room', $m->[0], undef, $m->[1]);
	$first //= $id;
}
for my $who (sort keys %expect)
{
	wait_end($live{$who});
	is(datas($live{$who}), $expect{$who}, "live: $who sees exactly its audiences");
	$live{$who}->close;
}

# Replayed from the table: the same decisions.
for my $who (sort keys %expect)
{
	my $c = connect_as($who, '?since=' . ($first - 1));
	wait_end($c);
	is(datas($c), $expect{$who}, "replay: $who sees exactly its audiences");
	$c->close;
}

# Rules that raise hide their messages and are logged.
my $log = slurp_file($pg->logfile);
like($log, qr/audience rule strict \$\."missing" failed: .*does not contain key/,
	'a rule that errors (strict mode) is logged with its error');
like($log, qr/audience rule .*failed: .*(operand|numeric)/, 'a rule with a type error is logged');

$pg->finish;
done_testing();
