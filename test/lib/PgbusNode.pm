# PgbusNode: a PostgreSQL::Test::Cluster node with pgbus_stream loaded and
# its SSE listener on a free port, plus the helpers the TAP tests share.
#
#   my $pg = PgbusNode->new('main');          # init, configure, start, CREATE EXTENSION
#   $pg->safe_psql('postgres', 'SELECT 1');   # any Cluster method is forwarded
#   my $id = $pg->broadcast('chat', "a\r\nb", 'custom');   # returns the msg_id
#   my $c = $pg->sse('/streams/chat');        # an SSEClient on the listener
#   $pg->finish;                              # stop the node, then check its log
#
# finish (or check_log) fails the test if the server log shows a process
# that died or stopped unasked (the rule is test/lib/LogScan.pm: killed by a
# signal, a worker's exit while the server was not stopping, a FATAL line of
# the extension), except kills and exits the test announced with expect_kill
# and expect_exit (and only those exact processes). The announcements are also
# written next to the log (<log>.expected_signals, one fixed string per line)
# so test/run_all.sh applies the same exceptions when it re-checks every log.

package PgbusNode;

use strict;
use warnings;

use Carp;
use Exporter 'import';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use IO::Socket::INET;
use Digest::SHA ();
use MIME::Base64 ();

use LogScan;
use SSEClient;

our @EXPORT_OK = qw(sql_literal parse_token token_covers token_le frames_ok ids_ok);

our $AUTOLOAD;
my $BEARER_ALL_SECRET = 'pgbusnode-bearer-all';

# new creates, configures and starts a node, creates the extension and waits
# for the SSE listener. Options:
#   conf       extra postgresql.conf lines (string)
#   heartbeat  pgbus_stream.heartbeat_interval in seconds (default 1)
#   start      0 to only init and configure (default 1)
#   extension  0 to skip CREATE EXTENSION (default 1)
#   timeout    seconds to wait for the listener (default 60)
#   bearer_all 1: streams are read with a JWT covering every stream (sent by
#              sse() unless the caller gives an Authorization header), for
#              tests of private streams that are not about credentials
# Unless conf sets pgbus_stream.jwt_secret, the node gets one of its own, and
# sse() sends a request with ?subscriber=<id> (and no Authorization header,
# no ?token=, no anonymous => 1) a JWT for every stream whose sub is <id>:
# a stored cursor is read only with a credential that names it.
#   allows_streaming 1: wal_level replica and WAL senders, for standbys
#              (default: 1 when PGBUS_TEST_WAL=replica, so that any test can
#              run with the capture's WAL records written)
sub new
{
	my ($class, $name, %opt) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(
		allows_streaming => $opt{allows_streaming} // (($ENV{PGBUS_TEST_WAL} // '') eq 'replica' ? 1 : 0));
	my $http_port = PostgreSQL::Test::Cluster::get_free_port();
	my $heartbeat = $opt{heartbeat} // 1;
	my $own_secret = ($opt{conf} // '') !~ /jwt_secret/;
	$node->append_conf(
		'postgresql.conf', qq{
shared_preload_libraries = 'pgbus_stream'
pgbus_stream.port = $http_port
pgbus_stream.heartbeat_interval = $heartbeat
log_min_messages = info
} . ($opt{bearer_all} || $own_secret ? "pgbus_stream.jwt_secret = '$BEARER_ALL_SECRET'\n" : '')
	  . ($opt{conf} // ''));

	my $self = bless {
		node => $node,
		name => $name,
		http_port => $http_port,
		expected_signals => [],
		timeout => $opt{timeout} // 60,
		bearer => $opt{bearer_all} ? jwt_all($BEARER_ALL_SECRET) : undef,
		sub_secret => $own_secret ? $BEARER_ALL_SECRET : undef,
	}, $class;

	# Any announced kill is written out even if the test dies half-way.
	unlink($self->_expected_file);

	return $self unless $opt{start} // 1;
	$node->start;
	if ($opt{extension} // 1)
	{
		$node->safe_psql('postgres', 'CREATE EXTENSION pgbus_stream');
	}
	$self->wait_http_ready
	  or croak("pgbus_stream listener did not accept connections on port $http_port");
	return $self;
}

# standby makes a streaming hot standby of $primary (a PgbusNode made with
# allows_streaming) from a fresh base backup: the extension preloaded, its
# own SSE port (conf: extra lines). Starts it and waits for its listener.
sub standby
{
	my ($class, $name, $primary, %opt) = @_;
	$primary->node->backup("backup_for_$name");
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init_from_backup($primary->node, "backup_for_$name", has_streaming => 1);
	my $http_port = PostgreSQL::Test::Cluster::get_free_port();
	$node->append_conf('postgresql.conf',
		"hot_standby = on\npgbus_stream.port = $http_port\n" . ($opt{conf} // ''));
	my $self = bless {
		node => $node,
		name => $name,
		http_port => $http_port,
		expected_signals => [],
		timeout => $opt{timeout} // 60,
		bearer => $primary->{bearer},
		sub_secret => $primary->{sub_secret},
	}, $class;
	unlink($self->_expected_file);
	$node->start;
	$self->wait_http_ready
	  or croak("pgbus_stream listener of standby $name did not accept connections on port $http_port");
	return $self;
}

sub node      { return $_[0]{node} }
sub http_port { return $_[0]{http_port} }
sub logfile   { return $_[0]{node}->logfile }

# Every other method goes to the PostgreSQL::Test::Cluster node.
sub AUTOLOAD
{
	my $self = shift;
	(my $m = $AUTOLOAD) =~ s/.*:://;
	return if $m eq 'DESTROY';
	croak "PgbusNode: no method $m" unless ref $self && $self->{node}->can($m);
	return $self->{node}->$m(@_);
}

# wait_http_ready waits until the listener accepts TCP connections.
sub wait_http_ready
{
	my ($self, $timeout) = @_;
	my $deadline = time + ($timeout // $self->{timeout});
	while (time < $deadline)
	{
		my $s = IO::Socket::INET->new(
			PeerAddr => '127.0.0.1',
			PeerPort => $self->{http_port},
			Proto => 'tcp',
			Timeout => 2);
		if ($s)
		{
			close $s;
			return 1;
		}
		sleep 0.1;
	}
	return 0;
}

# sse opens an SSEClient on the listener: $pg->sse($path, headers => {...}, ...).
sub sse
{
	my ($self, $path, %opt) = @_;
	my $anonymous = delete $opt{anonymous};
	my $given = grep { lc $_ eq 'authorization' } keys %{ $opt{headers} // {} };
	if (!$given && !$anonymous && $self->{sub_secret} && $path =~ /[?&]subscriber=([^&#]+)/
		&& $path !~ /[?&]token=/)
	{
		(my $sub = $1) =~ s/%([0-9A-Fa-f]{2})/chr(hex($1))/ge;
		$opt{headers} = { %{ $opt{headers} // {} },
			Authorization => 'Bearer ' . jwt_all($self->{sub_secret}, $sub) };
	}
	elsif ($self->{bearer} && !$given && !$anonymous)
	{
		$opt{headers} = { %{ $opt{headers} // {} }, Authorization => "Bearer $self->{bearer}" };
	}
	return SSEClient->connect(port => $self->{http_port}, path => $path, %opt);
}

# jwt_all is an HS256 JWT for every stream ("*"), valid for a day; with $sub,
# that identity (a durable subscriber id).
sub jwt_all
{
	my ($secret, $sub) = @_;
	my $b64 = sub { MIME::Base64::encode_base64url($_[0]) };
	my $claim_sub = '';
	if (defined $sub)
	{
		(my $s = $sub) =~ s/(["\\])/\\$1/g;
		$claim_sub = qq{,"sub":"$s"};
	}
	my $input = $b64->('{"alg":"HS256","typ":"JWT"}') . '.'
	  . $b64->('{"streams":["*"],"exp":' . (int(time) + 86400) . "$claim_sub}");
	return "$input." . $b64->(Digest::SHA::hmac_sha256($input, $secret));
}

# open_stream connects to /streams/<name> (plus an optional query string),
# and waits for the pgbus:connected frame. Returns the client; the test
# checks status itself.
sub open_stream
{
	my ($self, $name, %opt) = @_;
	my $query = delete $opt{query};
	my $path = "/streams/$name" . (defined $query ? "?$query" : '');
	my $c = $self->sse($path, %opt);
	$c->wait_for_events(1, $opt{timeout} // 10) if $c->status == 200;
	return $c;
}

# wait_stream_served waits until an anonymous GET /streams/<name> answers
# 200 (the worker learns about new streams asynchronously; until then an
# anonymous request for the name gets 401, as for any name it does not
# know). A private stream is served once the answer is no longer 404 to a
# request with a credential (private => 1): any credential makes the worker
# read the name, and a known private stream refuses a bad one with 401.
# Returns the number of answers seen before, or undef on timeout.
sub wait_stream_served
{
	my ($self, $name, $timeout, %opt) = @_;
	my %probe = $opt{private}
	  ? (headers => { Authorization => 'Bearer not-a-valid-token' })
	  : ();
	my $deadline = time + ($timeout // 10);
	my $misses = 0;
	$self->{last_serve_error} = undef;
	while (time < $deadline)
	{
		my $c = eval { $self->sse("/streams/$name", timeout => 5, %probe) };
		if ($c)
		{
			my $st = $c->status;
			$c->close;
			return $misses if $opt{private} ? $st != 404 : $st == 200;
			$self->{last_serve_error} = $st;
		}
		else
		{
			($self->{last_serve_error} = $@) =~ s/ at \S+ line \d+\.?\n?$//;
		}
		$misses++;
		sleep 0.1;
	}
	return undef;
}

# create_stream runs pgbus_stream.create_stream and returns the stream's id
# (its cursor epoch) once the listener serves it. The stream is public unless
# public => 0 is passed.
sub create_stream
{
	my ($self, $name, %opt) = @_;
	my $public = ($opt{public} // 1) ? 'true' : 'false';
	my $id = $self->{node}->safe_psql('postgres',
		'SELECT id FROM pgbus_stream.create_stream(' . sql_literal($name) . ", public => $public)");
	my $misses = $self->wait_stream_served($name, undef, private => $public eq 'false');
	croak "stream $name is not served after create_stream (last answer: "
	  . ($self->{last_serve_error} // 'none') . ')'
	  unless defined $misses;
	note "stream $name served after $misses answer(s)" if $misses;
	return $id;
}

# broadcast publishes one message in its own transaction and returns the msg_id.
sub broadcast
{
	my ($self, $stream, $data, $event, $visible_to) = @_;
	return $self->{node}->safe_psql('postgres', broadcast_sql($stream, $data, $event, $visible_to));
}

# broadcast_sql returns "SELECT pgbus_stream.broadcast(...)" with literals quoted.
sub broadcast_sql
{
	my ($stream, $data, $event, $visible_to) = @_;
	my @args = (sql_literal($stream), sql_literal($data));
	push @args, defined $event ? sql_literal($event) : 'NULL'
	  if defined $event || defined $visible_to;
	push @args, sql_literal($visible_to) if defined $visible_to;
	return 'SELECT pgbus_stream.broadcast(' . join(', ', @args) . ')';
}

# sql_literal quotes a byte string as an E'' literal; control characters
# are escaped so nothing depends on how psql reads lines.
sub sql_literal
{
	my ($s) = @_;
	return 'NULL' unless defined $s;
	$s =~ s/\\/\\\\/g;
	$s =~ s/'/\\'/g;
	$s =~ s/\r/\\r/g;
	$s =~ s/\n/\\n/g;
	$s =~ s/\t/\\t/g;
	$s =~ s/([\x00-\x1f\x7f])/sprintf('\\x%02x', ord $1)/ge;
	return "E'$s'";
}

# worker_pids returns the pids of the pgbus_stream workers (pg_stat_activity).
sub worker_pids
{
	my ($self) = @_;
	my $out = $self->{node}->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE backend_type = 'pgbus_stream worker' ORDER BY pid");
	return grep { /^\d+$/ } split /\n/, $out;
}

# wait_workers waits until $n workers run (and, with exclude => [pids], none
# of those). Returns the pids or an empty list on timeout.
sub wait_workers
{
	my ($self, $n, %opt) = @_;
	my %old = map { $_ => 1 } @{ $opt{exclude} // [] };
	my $deadline = time + ($opt{timeout} // $self->{timeout});
	while (time < $deadline)
	{
		my @p = eval { $self->worker_pids };
		return @p if @p >= $n && !grep { $old{$_} } @p;
		sleep 0.2;
	}
	return ();
}

# expect_kill announces that the test is about to kill $pid with signal
# $sig: the resulting "terminated by signal" line is then not a failure.
sub expect_kill
{
	my ($self, $pid, $sig) = @_;
	return $self->_announce("(PID $pid) was terminated by signal $sig");
}

# expect_exit announces that process $pid is about to exit with $code (e.g.
# a worker stopped by pg_terminate_backend or SIGTERM: exit code 1).
sub expect_exit
{
	my ($self, $pid, $code) = @_;
	return $self->_announce("(PID $pid) exited with exit code $code");
}

sub _announce
{
	my ($self, $line) = @_;
	push @{ $self->{expected_signals} }, $line;
	open my $fh, '>>', $self->_expected_file
	  or croak 'cannot write ' . $self->_expected_file . ": $!";
	print $fh "$line\n";
	close $fh;
	return;
}

sub _expected_file { return $_[0]{node}->logfile . '.expected_signals' }

# crash_lines returns the log lines that show a process dying or stopping
# unasked (LogScan), except the announced ones.
sub crash_lines
{
	my ($self) = @_;
	return LogScan::problems(slurp_file($self->logfile), @{ $self->{expected_signals} });
}

# check_log fails the test on any such line, and checks that every announced
# kill or exit was actually logged.
sub check_log
{
	my ($self) = @_;
	my @bad = $self->crash_lines;
	ok(!@bad, "$self->{name}: no process died or stopped unasked (server log)")
	  or diag(join("\n", @bad));
	if (@{ $self->{expected_signals} })
	{
		my $log = slurp_file($self->logfile);
		for my $e (@{ $self->{expected_signals} })
		{
			ok(index($log, $e) >= 0, "$self->{name}: the intended kill or exit was logged: $e");
		}
	}
	my @errors = grep { /ERROR|FATAL|PANIC/ && /pgbus/ }
	  split /\n/, slurp_file($self->logfile);
	note("pgbus-related ERROR/FATAL lines in the server log:\n" . join("\n", @errors))
	  if @errors;
	return !@bad;
}

# finish stops the node (fast shutdown: the worker sees SIGTERM) and checks
# its log.
sub finish
{
	my ($self) = @_;
	$self->{node}->stop('fast');
	return $self->check_log;
}

# frames_ok checks received frames against what was sent, in order:
# $expected is a list of [msg_id, data, event (default turbo-stream)].
# Data and event names must match exactly, and the ids pass ids_ok. Returns
# true if all of it holds.
sub frames_ok
{
	my ($frames, $expected, $since, $name) = @_;
	my $ok = is_deeply(
		[ map { [ $_->{data}, $_->{event} ] } @$frames ],
		[ map { [ $_->[1] =~ s/\r\n|\r|\n/\n/gr, $_->[2] // 'turbo-stream' ] } @$expected ],
		"$name: exactly the expected frames, in order");
	return ids_ok($frames, [ map { $_->[0] } @$expected ], $since, $name) && $ok;
}

# ids_ok checks the ids of received frames, frame $i carrying msg_id
# $msg_ids->[$i]: every id must be a cursor token that grows (covers
# everything the previous one did, starting from $since when given), covers
# its own msg_id, and the previous id must not have covered that msg_id.
sub ids_ok
{
	my ($frames, $msg_ids, $since, $name) = @_;
	my @f = @$frames;
	my @bad;
	my $prev = $since;
	for my $i (0 .. $#f)
	{
		my $tok = $f[$i]{id};
		my $mid = $msg_ids->[$i];
		if (!defined $tok || !parse_token($tok))
		{
			push @bad, "frame $i: id '" . ($tok // 'undef') . "' is not a cursor token";
			next;
		}
		if (defined $prev && ($tok eq $prev || !token_le($prev, $tok)))
		{
			push @bad, "frame $i: id '$tok' does not grow from '$prev'";
		}
		if (defined $mid && !token_covers($tok, $mid))
		{
			push @bad, "frame $i: id '$tok' does not cover msg_id $mid";
		}
		if (defined $mid && defined $prev && token_covers($prev, $mid))
		{
			push @bad, "frame $i: previous id '$prev' already covered msg_id $mid";
		}
		$prev = $tok;
	}
	my $ok = ok(!@bad, "$name: ids grow, each covers its own msg_id");
	diag(join("\n", @bad)) if @bad;
	return $ok;
}

# ---- cursor tokens ----
# Text form: [<epoch>~]<horizon>[_<range>(.<range>)*], range = a or a-b.

# parse_token returns { epoch, horizon, ranges => [[a, b], ...] } or undef.
sub parse_token
{
	my ($t) = @_;
	return undef unless defined $t;
	return undef unless $t =~ /^(?:(\d+)~)?(\d+)(?:_([0-9.\-]+))?$/;
	my %p = (epoch => $1 // 0, horizon => $2 + 0, ranges => []);
	if (defined $3)
	{
		for my $r (split /\./, $3)
		{
			return undef unless $r =~ /^(\d+)(?:-(\d+))?$/;
			push @{ $p{ranges} }, [ $1 + 0, defined $2 ? $2 + 0 : $1 + 0 ];
		}
	}
	return \%p;
}

# token_covers is true if the token says msg_id $id was seen.
sub token_covers
{
	my ($t, $id) = @_;
	my $p = ref $t ? $t : parse_token($t);
	return 0 unless $p;
	return 1 if $id <= $p->{horizon};
	for my $r (@{ $p->{ranges} })
	{
		return 1 if $id >= $r->[0] && $id <= $r->[1];
	}
	return 0;
}

# token_le is true if every id covered by token $x is covered by token $y
# (same epoch).
sub token_le
{
	my ($x, $y) = @_;
	my ($px, $py) = (parse_token($x), parse_token($y));
	return 0 unless $px && $py && $px->{epoch} == $py->{epoch};
	for my $id (1 .. $px->{horizon})
	{
		return 0 unless token_covers($py, $id);
	}
	for my $r (@{ $px->{ranges} })
	{
		for my $id ($r->[0] .. $r->[1])
		{
			return 0 unless token_covers($py, $id);
		}
	}
	return 1;
}

1;
