// Package sniff reads the host name a TCP client names in the first bytes
// it sends: the server_name (SNI) of a TLS ClientHello, or the Host header
// of a plain HTTP/1.x request.
//
// What it is for: with a domain allowlist, the egress stack peeks at a
// flow's first bytes before it opens the host side of the connection, and
// checks the name the flow claims against the name the destination address
// was allowed for (the name whose DNS answer produced it). A client that
// resolved an allowed name and then speaks to the same address, a shared
// CDN front for example, while naming another host is caught here.
//
// The parsers are pure functions of the bytes seen so far. Each returns
// [NeedMore] until it can decide, and its answer for a prefix of a stream
// is either NeedMore or the answer for the whole stream: bytes appended
// after a decision never change it. They are strict: anything a lenient
// server might read differently from this parser (two names, two Host
// headers, bare line feeds, lengths that do not add up) is [Malformed],
// so a caller that refuses Malformed flows cannot be talked past. Neither
// reads more than its limit ([MaxClientHello], [MaxHTTPHeader]); a caller
// never needs to buffer more than that. They hold no state and never block:
// a caller waiting for NeedMore to turn into an answer needs its own time
// limit, since a client of another protocol may send a few bytes that could
// start a request ("HELO") and then wait for the server to speak.
//
// What it deliberately does not do: no decryption and no certificate
// checks. It sees the name a flow claims first and nothing after: inside
// TLS the HTTP Host or HTTP/2 :authority may name another host than the SNI
// (domain fronting), and on a plain HTTP connection kept alive the later
// requests may name other hosts. Both only reach the address the allowed
// name resolved to, but a shared front end there may route them on. With
// Encrypted Client Hello the real (inner) name is encrypted and invisible:
// the name returned is the outer, public name. HTTP/2 with prior knowledge
// over cleartext ("PRI * HTTP/2.0") and any other protocol are [NotThis];
// what to do with such flows is the caller's policy.
package sniff

// Result is the outcome of looking at a stream's first bytes.
type Result uint8

const (
	// NeedMore: the bytes so far are a prefix of what is looked for;
	// call again with more.
	NeedMore Result = iota
	// Found: a complete message was read; the name is valid (it may be
	// empty for a ClientHello without SNI).
	Found
	// NotThis: the stream is not this protocol.
	NotThis
	// Malformed: the stream is this protocol but the message is invalid,
	// ambiguous, or larger than the limit.
	Malformed
)

func (r Result) String() string {
	switch r {
	case NeedMore:
		return "need more"
	case Found:
		return "found"
	case NotThis:
		return "not this protocol"
	case Malformed:
		return "malformed"
	}
	return "unknown"
}

// Proto is the protocol [Name] read a name from.
type Proto uint8

const (
	ProtoNone Proto = iota // not decided, or neither TLS nor HTTP/1.x
	ProtoTLS               // a TLS ClientHello's server_name
	ProtoHTTP              // a plain HTTP/1.x request's Host
)

func (p Proto) String() string {
	switch p {
	case ProtoTLS:
		return "tls"
	case ProtoHTTP:
		return "http"
	}
	return "none"
}

// Name reads the name a stream claims whichever of TLS and HTTP/1.x it
// speaks: the first byte decides (0x16, a TLS handshake record, cannot
// start an HTTP request), and the result is that of [ClientHello] or
// [HTTPHost]. proto is ProtoNone while res is NeedMore and when it is
// NotThis. A caller never needs to buffer more than the larger of
// [MaxClientHello] and [MaxHTTPHeader] bytes.
func Name(b []byte) (name string, proto Proto, res Result) {
	if len(b) == 0 {
		return "", ProtoNone, NeedMore
	}
	if b[0] == recordHandshake {
		proto = ProtoTLS
		name, res = ClientHello(b)
	} else {
		proto = ProtoHTTP
		name, res = HTTPHost(b)
	}
	if res == NeedMore || res == NotThis {
		proto = ProtoNone
	}
	return name, proto, res
}
