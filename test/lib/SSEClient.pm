# SSEClient: a small Server-Sent-Events client for the TAP tests.
#
# It speaks HTTP/1.1 over a plain IO::Socket::IP (IPv4 or IPv6), reads without blocking
# (IO::Select with a deadline on every wait, so a test never hangs), decodes
# chunked or length-delimited bodies, and parses the body incrementally into
# SSE frames as a browser's EventSource would (lines end with CRLF, LF or CR;
# a blank line ends a frame; ":" starts a comment).
#
#   my $c = SSEClient->connect(port => $port, path => '/streams/chat',
#                              headers => { 'Last-Event-ID' => '3~42' });
#   $c->status;                      # 200
#   $c->header('content-type');      # 'text/event-stream'
#   $c->wait_for_events(3, 10);      # true once 3 frames arrived (10 s max)
#   my @frames = $c->events;         # { id, event, data, data_lines, retry, comments, raw }
#   my @comments = $c->comments;     # every comment line, without the ':'
#   $c->close;
#
# Non-SSE answers (404, 405, ...) are read the same way: $c->body returns what
# arrived, $c->wait_closed waits for the server to end the response.

package SSEClient;

use strict;
use warnings;

use Carp;
use Errno qw(EAGAIN EINTR EWOULDBLOCK EINPROGRESS);
use IO::Select;
use IO::Socket::IP;
use Socket qw(IPPROTO_TCP TCP_NODELAY);
use Time::HiRes qw(time);

our $DEFAULT_TIMEOUT = 10;

# connect opens a connection, sends one request and waits for the whole
# response head. Croaks if the server does not answer within `timeout`.
# Options: port (required), host ('127.0.0.1'), path ('/'), method ('GET'),
# headers (hashref or arrayref of pairs; sent as given), body (string),
# timeout (seconds), http_version ('1.1'), raw_request (sent verbatim instead
# of building a request).
sub connect
{
	my ($class, %opt) = @_;
	croak 'SSEClient->connect: port is required' unless $opt{port};
	my $self = bless {
		host => $opt{host} // '127.0.0.1',
		port => $opt{port},
		path => $opt{path} // '/',
		timeout => $opt{timeout} // $DEFAULT_TIMEOUT,
		rbuf => '',         # raw bytes not yet processed (head, then transfer-coded body)
		body => '',         # decoded body bytes received so far
		parse_pos => 0,     # how far into body the SSE parser has consumed
		frame => undef,     # frame being built
		events => [],
		comments => [],
		head_done => 0,
		eof => 0,
		body_done => 0,
		chunked => 0,
		remaining => undef, # content-length left, when known
		chunk_left => undef,
	}, $class;

	my $sock = IO::Socket::IP->new(
		PeerHost => $self->{host},
		PeerPort => $self->{port},
		Proto => 'tcp',
		Timeout => $self->{timeout})
	  or croak "SSEClient: cannot connect to $self->{host}:$self->{port}: $@";
	setsockopt($sock, IPPROTO_TCP, TCP_NODELAY, 1);
	$sock->blocking(0);
	$sock->autoflush(1);
	$self->{sock} = $sock;
	$self->{sel} = IO::Select->new($sock);

	my $req = $opt{raw_request};
	if (!defined $req)
	{
		my $method = $opt{method} // 'GET';
		my $ver = $opt{http_version} // '1.1';
		my @h = ref $opt{headers} eq 'ARRAY' ? @{ $opt{headers} }
		  : map { ($_, $opt{headers}{$_}) } sort keys %{ $opt{headers} // {} };
		my %have = map { lc($_) => 1 } @h[ grep { $_ % 2 == 0 } 0 .. $#h ];
		$req = "$method $self->{path} HTTP/$ver\r\n";
		my $h = $self->{host} =~ /:/ ? "[$self->{host}]" : $self->{host};
		$req .= "Host: $h:$self->{port}\r\n" unless $have{host};
		$req .= "Accept: text/event-stream\r\n" unless $have{accept};
		while (my ($k, $v) = splice(@h, 0, 2))
		{
			$req .= "$k: $v\r\n";
		}
		if (defined $opt{body})
		{
			$req .= 'Content-Length: ' . length($opt{body}) . "\r\n"
			  unless $have{'content-length'};
			$req .= "\r\n" . $opt{body};
		}
		else
		{
			$req .= "\r\n";
		}
	}
	$self->_write_all($req);

	my $deadline = time + $self->{timeout};
	while (!$self->{head_done})
	{
		my $left = $deadline - time;
		croak "SSEClient: no complete response head from $self->{path} within $self->{timeout}s"
		  . " (received: " . _printable($self->{rbuf}) . ")"
		  if $left <= 0;
		last if !$self->_read_some($left) && $self->{eof};
	}
	croak "SSEClient: connection closed before a response head for $self->{path}"
	  . " (received: " . _printable($self->{rbuf}) . ")"
	  unless $self->{head_done};
	return $self;
}

sub _write_all
{
	my ($self, $data) = @_;
	my $deadline = time + $self->{timeout};
	my $off = 0;
	while ($off < length $data)
	{
		my $n = syswrite($self->{sock}, $data, length($data) - $off, $off);
		if (defined $n)
		{
			$off += $n;
			next;
		}
		croak "SSEClient: write failed: $!"
		  unless $! == EAGAIN || $! == EWOULDBLOCK || $! == EINTR || $! == EINPROGRESS;
		my $left = $deadline - time;
		croak "SSEClient: write timed out" if $left <= 0;
		IO::Select->new($self->{sock})->can_write($left);
	}
	return;
}

# _read_some waits up to $wait seconds for bytes, reads what is there and
# processes it. Returns the number of bytes read (0 on timeout or EOF).
sub _read_some
{
	my ($self, $wait) = @_;
	return 0 if $self->{eof} || !$self->{sock};
	$wait = 0 if $wait < 0;
	my @ready = $self->{sel}->can_read($wait);
	return 0 unless @ready;
	my $total = 0;
	while (1)
	{
		my $buf;
		my $n = sysread($self->{sock}, $buf, 65536);
		if (!defined $n)
		{
			last if $! == EAGAIN || $! == EWOULDBLOCK || $! == EINTR;
			# ECONNRESET and friends: treat as end of stream, remember why.
			$self->{error} = "$!";
			$self->{eof} = 1;
			last;
		}
		if ($n == 0)
		{
			$self->{eof} = 1;
			last;
		}
		$total += $n;
		$self->{rbuf} .= $buf;
		$self->{bytes_read} += $n;
	}
	$self->_process;
	return $total;
}

sub _process
{
	my ($self) = @_;
	if (!$self->{head_done})
	{
		my $end = index($self->{rbuf}, "\r\n\r\n");
		my $sep = 4;
		if ($end < 0)
		{
			$end = index($self->{rbuf}, "\n\n");
			$sep = 2;
		}
		return if $end < 0;
		my $head = substr($self->{rbuf}, 0, $end);
		substr($self->{rbuf}, 0, $end + $sep) = '';
		$self->_parse_head($head);
	}
	$self->_decode_body;
	$self->_parse_sse;
	return;
}

sub _parse_head
{
	my ($self, $head) = @_;
	my @lines = split /\r?\n/, $head;
	my $status_line = shift @lines // '';
	$self->{status_line} = $status_line;
	if ($status_line =~ m{^HTTP/(\d+\.\d+)\s+(\d{3})(?:\s+(.*))?$})
	{
		$self->{http_version} = $1;
		$self->{status} = $2 + 0;
		$self->{reason} = $3 // '';
	}
	else
	{
		$self->{status} = 0;
	}
	$self->{header_list} = [];
	$self->{headers} = {};
	for my $l (@lines)
	{
		next unless $l =~ /^([^:\s]+)\s*:\s*(.*?)\s*$/;
		my ($k, $v) = (lc $1, $2);
		push @{ $self->{header_list} }, [ $k, $v ];
		$self->{headers}{$k} =
		  exists $self->{headers}{$k} ? "$self->{headers}{$k}, $v" : $v;
	}
	my $te = $self->{headers}{'transfer-encoding'} // '';
	$self->{chunked} = ($te =~ /\bchunked\b/i) ? 1 : 0;
	$self->{remaining} = $self->{headers}{'content-length'}
	  if !$self->{chunked} && defined $self->{headers}{'content-length'};
	$self->{head_done} = 1;
	return;
}

sub _decode_body
{
	my ($self) = @_;
	return if $self->{body_done};
	if ($self->{chunked})
	{
		while (length $self->{rbuf})
		{
			if (!defined $self->{chunk_left})
			{
				my $nl = index($self->{rbuf}, "\r\n");
				return if $nl < 0;
				my $size_line = substr($self->{rbuf}, 0, $nl);
				substr($self->{rbuf}, 0, $nl + 2) = '';
				$size_line =~ s/;.*//;
				$size_line =~ s/\s+//g;
				if ($size_line !~ /^[0-9a-fA-F]+$/)
				{
					$self->{protocol_error} = "bad chunk size line '$size_line'";
					$self->{body_done} = 1;
					return;
				}
				$self->{chunk_left} = hex $size_line;
				if ($self->{chunk_left} == 0)
				{
					# Last chunk; trailers are ignored.
					$self->{body_done} = 1;
					$self->{rbuf} = '';
					return;
				}
			}
			if ($self->{chunk_left} > 0)
			{
				my $take = length $self->{rbuf};
				$take = $self->{chunk_left} if $take > $self->{chunk_left};
				$self->{body} .= substr($self->{rbuf}, 0, $take);
				substr($self->{rbuf}, 0, $take) = '';
				$self->{chunk_left} -= $take;
			}
			if ($self->{chunk_left} == 0)
			{
				return if length $self->{rbuf} < 2;
				if (substr($self->{rbuf}, 0, 2) ne "\r\n")
				{
					$self->{protocol_error} = 'chunk not followed by CRLF';
					$self->{body_done} = 1;
					return;
				}
				substr($self->{rbuf}, 0, 2) = '';
				$self->{chunk_left} = undef;
			}
		}
	}
	elsif (defined $self->{remaining})
	{
		my $take = length $self->{rbuf};
		$take = $self->{remaining} if $take > $self->{remaining};
		$self->{body} .= substr($self->{rbuf}, 0, $take);
		substr($self->{rbuf}, 0, $take) = '';
		$self->{remaining} -= $take;
		$self->{body_done} = 1 if $self->{remaining} == 0;
	}
	else
	{
		# Delimited by the end of the connection.
		$self->{body} .= $self->{rbuf};
		$self->{rbuf} = '';
		$self->{body_done} = 1 if $self->{eof};
	}
	return;
}

# _parse_sse consumes complete lines of the decoded body (EventSource rules).
sub _parse_sse
{
	my ($self) = @_;
	my $body = \$self->{body};
	while (1)
	{
		pos($$body) = $self->{parse_pos};
		last unless $$body =~ /\G([^\r\n]*)(\r\n|\r|\n)/gc;
		my ($line, $eol) = ($1, $2);
		# A lone CR at the very end of what arrived may be the first half of
		# a CRLF: wait for the next byte unless the stream is over.
		last
		  if $eol eq "\r"
		  && pos($$body) == length($$body)
		  && !$self->{body_done};
		$self->{parse_pos} = pos($$body);
		$self->_sse_line($line, $eol);
	}
	return;
}

sub _sse_line
{
	my ($self, $line, $eol) = @_;
	my $f = $self->{frame} //= { data_lines => [], comments => [], fields => [], raw => '' };
	$f->{raw} .= $line . $eol;
	if ($line eq '')
	{
		$self->{frame} = undef;
		# Per the EventSource rules a frame with no id, event or data field
		# is not an event (comments only, a lone "retry:", stray blank lines),
		# and one with an id but no event or data only sets the last event id
		# (last_event_id), as a browser's EventSource does.
		$self->{retry} = $f->{retry} if defined $f->{retry};
		my @ids = grep { $_->[0] eq 'id' } @{ $f->{fields} };
		$self->{last_event_id} = $ids[-1][1] if @ids;
		return
		  unless grep { $_->[0] eq 'event' || $_->[0] eq 'data' }
		  @{ $f->{fields} };
		$f->{data} = join("\n", @{ $f->{data_lines} }) if @{ $f->{data_lines} };
		$f->{index} = scalar @{ $self->{events} };
		push @{ $self->{events} }, $f;
		return;
	}
	if (substr($line, 0, 1) eq ':')
	{
		my $c = substr($line, 1);
		$c =~ s/^ //;
		push @{ $f->{comments} }, $c;
		push @{ $self->{comments} }, $c;
		return;
	}
	my ($name, $value) = $line =~ /^([^:]*)(?::(.*))?$/s;
	$value //= '';
	$value =~ s/^ //;
	push @{ $f->{fields} }, [ $name, $value ];
	if ($name eq 'data')
	{
		push @{ $f->{data_lines} }, $value;
	}
	elsif ($name eq 'id' || $name eq 'event' || $name eq 'retry')
	{
		# A repeated field is a framing error for these tests: keep every
		# value so a test can see it.
		push @{ $f->{"all_$name"} }, $value;
		$f->{$name} = $value;
	}
	else
	{
		push @{ $f->{unknown} }, $name;
	}
	return;
}

sub _printable
{
	my ($s) = @_;
	$s = substr($s, 0, 300) . '...' if length $s > 300;
	$s =~ s/([^\x20-\x7e])/sprintf('\\x%02x', ord $1)/ge;
	return "'$s'";
}

# ---- accessors ----

sub status      { return $_[0]{status} }
sub reason      { return $_[0]{reason} }
sub status_line { return $_[0]{status_line} }

# header returns one response header (name case-insensitive; repeated
# headers joined with ", "), or undef.
sub header { my ($self, $name) = @_; return $self->{headers}{ lc $name } }

# headers returns the response headers as a hashref keyed by lower-case name.
sub headers { return { %{ $_[0]{headers} } } }

# header_list returns [name, value] pairs in the order received.
sub header_list { return @{ $_[0]{header_list} } }

# body returns the decoded body bytes received so far.
sub body { return $_[0]{body} }

# retry returns the last "retry:" value received, or undef.
sub retry { return $_[0]{retry} }

# last_event_id is the id an EventSource would send back as Last-Event-ID:
# the last id field of any frame so far (also of one without data).
sub last_event_id { return $_[0]{last_event_id} }

# events returns every complete frame received so far (hashrefs).
sub events { return @{ $_[0]{events} } }

sub event_count { return scalar @{ $_[0]{events} } }

# data_events returns the frames that carry an id (message frames),
# leaving out control frames such as pgbus:connected.
sub data_events { return grep { defined $_->{id} } @{ $_[0]{events} } }

# comments returns every comment line received so far (text after ":",
# one leading space removed).
sub comments { return @{ $_[0]{comments} } }

# closed is true once the server ended the connection (or it failed).
sub closed { return $_[0]{eof} }

sub protocol_error { return $_[0]{protocol_error} }

# poll reads whatever arrives within $timeout seconds (default 0: only what
# is already there). Returns the number of bytes read.
sub poll
{
	my ($self, $timeout) = @_;
	my $deadline = time + ($timeout // 0);
	my $n = 0;
	do
	{
		my $got = $self->_read_some($deadline - time);
		$n += $got;
		return $n if $self->{eof};
	} while (time < $deadline);
	return $n;
}

# wait_until waits until $cond->($self) is true or $timeout seconds have
# passed. Returns the condition's last value.
sub wait_until
{
	my ($self, $cond, $timeout) = @_;
	my $deadline = time + ($timeout // $self->{timeout});
	while (1)
	{
		my $r = $cond->($self);
		return $r if $r;
		my $left = $deadline - time;
		return $r if $left <= 0;
		if ($self->{eof})
		{
			# Nothing more will come; one last look.
			return $cond->($self);
		}
		$self->_read_some($left > 0.2 ? 0.2 : $left);
	}
}

# wait_for_events waits until at least $n frames (all frames, control
# frames included) arrived. Returns true if they did within $timeout.
sub wait_for_events
{
	my ($self, $n, $timeout) = @_;
	return $self->wait_until(sub { scalar(@{ $_[0]{events} }) >= $n }, $timeout) ? 1 : 0;
}

# wait_for_data_events is wait_for_events counting only frames with an id.
sub wait_for_data_events
{
	my ($self, $n, $timeout) = @_;
	return $self->wait_until(sub { scalar($_[0]->data_events) >= $n }, $timeout) ? 1 : 0;
}

# wait_for_comment waits for a comment matching $re (counting from the
# $from-th comment, default 0). Returns the comment or undef.
sub wait_for_comment
{
	my ($self, $re, $timeout, $from) = @_;
	$from //= 0;
	my $found;
	$self->wait_until(
		sub {
			my @c = @{ $_[0]{comments} };
			for my $i ($from .. $#c)
			{
				if ($c[$i] =~ $re) { $found = $c[$i]; return 1 }
			}
			return 0;
		},
		$timeout);
	return $found;
}

# wait_closed waits for the server to close the connection (or end a
# delimited body). Returns true if it did within $timeout.
sub wait_closed
{
	my ($self, $timeout) = @_;
	return $self->wait_until(sub { $_[0]{eof} || $_[0]{body_done} }, $timeout) ? 1 : 0;
}

# take_events returns the frames received since the last take_events call.
sub take_events
{
	my ($self) = @_;
	my $from = $self->{taken} // 0;
	my @e = @{ $self->{events} }[ $from .. $#{ $self->{events} } ];
	$self->{taken} = scalar @{ $self->{events} };
	return @e;
}

# forget_taken drops the frames take_events returned and the body text
# already parsed, so that a client reading a long stream stays small (events
# and body then hold only what came after).
sub forget_taken
{
	my ($self) = @_;
	splice(@{ $self->{events} }, 0, $self->{taken} // 0);
	$self->{taken} = 0;
	substr($self->{body}, 0, $self->{parse_pos} // 0) = '';
	$self->{parse_pos} = 0;
	return;
}

# close closes the socket (idempotent).
sub close
{
	my ($self) = @_;
	if ($self->{sock})
	{
		$self->{sel}->remove($self->{sock});
		CORE::close($self->{sock});
		$self->{sock} = undef;
	}
	$self->{eof} = 1;
	return;
}

sub DESTROY { my ($self) = @_; $self->close if $self->{sock}; return }

1;
