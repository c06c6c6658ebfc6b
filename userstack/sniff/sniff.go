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
// never needs to buffer more than that.
//
// What it deliberately does not do: no decryption and no certificate
// checks (a client may name an allowed host and then talk to whatever
// answers at that address; the address itself was allowed by DNS). With
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
