package sniff

// MaxClientHello bounds what [ClientHello] reads: a ClientHello whose
// records do not all end within the stream's first MaxClientHello bytes is
// Malformed. Real ones are a few hundred bytes to a few kilobytes (a
// post-quantum key share adds about 1.2 KB).
const MaxClientHello = 64 << 10

const (
	recordHeaderLen  = 5
	maxRecordLen     = 1 << 14 // TLSPlaintext.length limit (RFC 8446 section 5.1)
	recordHandshake  = 0x16
	typeClientHello  = 1
	handshakeHdrLen  = 4
	extServerName    = 0
	nameTypeHostName = 0
)

// ClientHello reads the server name from the first bytes b of a TCP
// stream that should start with a TLS ClientHello.
//
// The ClientHello may be fragmented over several TLS handshake records
// (they are reassembled) and b may end anywhere (NeedMore until the
// message is complete). Found: name is the host_name of the server_name
// extension exactly as the client sent it (the caller canonicalises and
// validates it), or "" when the complete ClientHello has no server_name.
// With Encrypted Client Hello this is the outer, public name. NotThis: b
// does not start with a TLS handshake record. Malformed: a TLS record that
// does not carry a valid ClientHello (wrong message type, lengths that do
// not add up, a repeated extension, a server_name list with no entry or two
// host_names, data after the ClientHello in its last record, another record
// type in between), or one that does not end within MaxClientHello bytes.
func ClientHello(b []byte) (name string, res Result) {
	if len(b) > MaxClientHello {
		b = b[:MaxClientHello]
	}
	msg, res := reassemble(b)
	if res != Found {
		return "", res
	}
	return parseClientHello(msg[handshakeHdrLen:])
}

// needMore is NeedMore, or Malformed once b holds MaxClientHello bytes
// (b was cut there) and still is not enough.
func needMore(b []byte) ([]byte, Result) {
	if len(b) >= MaxClientHello {
		return nil, Malformed
	}
	return nil, NeedMore
}

// reassemble collects the handshake bytes of the records at the start of b
// until they hold one complete handshake message, a ClientHello, and
// returns that message with its 4-byte header.
func reassemble(b []byte) ([]byte, Result) {
	var msg []byte
	need := -1 // the message's length with its header, once known
	for off := 0; ; {
		rest := b[off:]
		if len(rest) == 0 {
			return needMore(b)
		}
		if rest[0] != recordHandshake {
			if off == 0 {
				return nil, NotThis
			}
			return nil, Malformed // e.g. application data before the hello is complete
		}
		if len(rest) < 2 {
			return needMore(b)
		}
		if rest[1] != 3 { // record version major: 3 for SSL 3.0 and every TLS
			if off == 0 {
				return nil, NotThis
			}
			return nil, Malformed
		}
		if len(rest) < recordHeaderLen {
			return needMore(b)
		}
		n := int(rest[3])<<8 | int(rest[4])
		if n == 0 || n > maxRecordLen {
			return nil, Malformed
		}
		if off+recordHeaderLen+n > MaxClientHello {
			return nil, Malformed
		}
		frag := rest[recordHeaderLen:min(len(rest), recordHeaderLen+n)]
		if msg == nil {
			// The common case, one record, needs no copy; the capacity
			// limit makes a later append copy instead of writing into b.
			msg = frag[:len(frag):len(frag)]
		} else {
			msg = append(msg, frag...)
		}
		if len(msg) >= 1 && msg[0] != typeClientHello {
			return nil, Malformed
		}
		if need < 0 && len(msg) >= handshakeHdrLen {
			need = handshakeHdrLen + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]))
			if need > MaxClientHello {
				return nil, Malformed
			}
		}
		if len(frag) < n {
			return needMore(b)
		}
		off += recordHeaderLen + n
		if need >= 0 && len(msg) >= need {
			if len(msg) > need {
				// Nothing may follow a ClientHello in its record: the
				// client must wait for the server's answer.
				return nil, Malformed
			}
			return msg[:need], Found
		}
	}
}

// reader is a bounds-checked cursor over a message; after the first
// short read it stays failed and returns zeros.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) u8() int {
	if len(r.b) < 1 {
		r.bad = true
		return 0
	}
	v := int(r.b[0])
	r.b = r.b[1:]
	return v
}

func (r *reader) u16() int {
	if len(r.b) < 2 {
		r.bad = true
		return 0
	}
	v := int(r.b[0])<<8 | int(r.b[1])
	r.b = r.b[2:]
	return v
}

func (r *reader) bytes(n int) []byte {
	if len(r.b) < n {
		r.bad = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// parseClientHello parses a ClientHello body (RFC 8446 section 4.1.2,
// RFC 5246 section 7.4.1.2) and returns its host_name.
func parseClientHello(body []byte) (string, Result) {
	r := reader{b: body}
	if r.u16()>>8 != 3 { // legacy_version
		return "", Malformed
	}
	r.bytes(32) // random
	if n := r.u8(); n > 32 {
		return "", Malformed
	} else {
		r.bytes(n) // legacy_session_id
	}
	if n := r.u16(); n < 2 || n%2 != 0 {
		return "", Malformed
	} else {
		r.bytes(n) // cipher_suites
	}
	if n := r.u8(); n < 1 {
		return "", Malformed
	} else {
		r.bytes(n) // legacy_compression_methods
	}
	if r.bad {
		return "", Malformed
	}
	if len(r.b) == 0 {
		return "", Found // no extensions (allowed before TLS 1.3)
	}
	if n := r.u16(); r.bad || n != len(r.b) {
		return "", Malformed
	}
	seen := make(map[int]bool)
	var name string
	for len(r.b) > 0 {
		typ := r.u16()
		data := r.bytes(r.u16())
		if r.bad || seen[typ] {
			return "", Malformed
		}
		seen[typ] = true
		if typ == extServerName {
			n, ok := parseServerName(data)
			if !ok {
				return "", Malformed
			}
			name = n
		}
	}
	return name, Found
}

// parseServerName parses the server_name extension's data (RFC 6066
// section 3): a non-empty list of (name_type, opaque<1..2^16-1>) with at
// most one host_name.
func parseServerName(data []byte) (string, bool) {
	r := reader{b: data}
	if n := r.u16(); r.bad || n == 0 || n != len(r.b) {
		return "", false
	}
	var name string
	found := false
	for len(r.b) > 0 {
		typ := r.u8()
		n := r.u16()
		v := r.bytes(n)
		if r.bad || n == 0 {
			return "", false
		}
		if typ == nameTypeHostName {
			if found {
				return "", false
			}
			name, found = string(v), true
		}
	}
	return name, true
}
