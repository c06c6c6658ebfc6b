// Command domainprobe is a test helper run inside the sandbox by the
// domain allowlist's attack tests (integration/domains_attack_test.go):
// each subcommand tries one way around the allowlist and prints one line,
// the result. It is never shipped.
//
//	dns udp|tcp SERVER KIND NAME   a query to SERVER ("resolv": the
//	                               sandbox's resolver, or ADDR), port 53;
//	                               prints rcode:NAME answers:N, or err:...
//	late ADDR:PORT DELAY SNI       connect, say nothing for DELAY, then
//	                               send a TLS ClientHello naming SNI
//	pause ADDR:PORT DELAY HOST     send "G", wait DELAY, then the rest of
//	                               an HTTP request for HOST
//	raw ADDR:PORT TEXT             send TEXT (Go-quoted) at once
//	serverfirst ADDR:PORT          read the server's banner line, answer
//	                               as an SSH client, read the echo
//
// The TCP ones print "echo:N" (the lab's echo server sent N bytes back),
// "err:ECONNRESET" (the stack reset the flow) or another err.
package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"crypto/tls"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: domainprobe SUBCOMMAND [ARGS]")
		os.Exit(2)
	}
	out, err := run(os.Args[1], os.Args[2:])
	if err != nil {
		out = errString(err)
	}
	fmt.Println(out)
}

func errString(err error) string {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return "err:" + unix.ErrnoName(errno)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return "err:timeout"
	}
	if errors.Is(err, io.EOF) {
		return "err:EOF"
	}
	return "err:" + err.Error()
}

func run(cmd string, args []string) (string, error) {
	switch cmd {
	case "dns":
		return dns(args[0], server(args[1]), args[2], args[3])
	case "late":
		d, err := time.ParseDuration(args[1])
		if err != nil {
			return "", err
		}
		hello, err := clientHello(args[2])
		if err != nil {
			return "", err
		}
		return talk(args[0], []byte{}, d, hello)
	case "pause":
		d, err := time.ParseDuration(args[1])
		if err != nil {
			return "", err
		}
		req := "GET / HTTP/1.1\r\nHost: " + args[2] + "\r\nUser-Agent: domainprobe\r\n\r\n"
		return talk(args[0], []byte(req[:1]), d, []byte(req[1:]))
	case "serverfirst":
		// Wait for the server's banner line, then answer as an SSH client
		// and expect the answer echoed.
		c, err := net.DialTimeout("tcp", args[0], 10*time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		r := bufio.NewReader(c)
		banner, err := r.ReadString('\n')
		if err != nil {
			return "", err
		}
		if _, err := c.Write([]byte("SSH-2.0-domainprobe\r\n")); err != nil {
			return "", err
		}
		echo, err := r.ReadString('\n')
		if err != nil {
			return "", err
		}
		return "banner:" + strings.TrimSpace(banner) + " echo:" + strings.TrimSpace(echo), nil
	case "raw":
		s, err := strconv.Unquote(`"` + args[1] + `"`)
		if err != nil {
			return "", err
		}
		return talk(args[0], []byte(s), 0, nil)
	}
	return "", fmt.Errorf("unknown subcommand %q", cmd)
}

// talk connects, sends first, waits d, sends second, and reads what the
// echo server sends back (all of it).
func talk(addr string, first []byte, d time.Duration, second []byte) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10*time.Second + d))
	if len(first) > 0 {
		if _, err := c.Write(first); err != nil {
			return "", err
		}
	}
	time.Sleep(d)
	if len(second) > 0 {
		if _, err := c.Write(second); err != nil {
			return "", err
		}
	}
	want := len(first) + len(second)
	got, err := io.ReadAtLeast(c, make([]byte, want), want)
	if err != nil {
		return "", err
	}
	return "echo:" + strconv.Itoa(got), nil
}

// clientHello is the first flight of a Go TLS client naming sni.
func clientHello(sni string) ([]byte, error) {
	a, b := net.Pipe()
	defer b.Close()
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: sni, MinVersion: tls.VersionTLS12})
		_ = c.Handshake() // the peer never answers
		a.Close()
	}()
	var out []byte
	buf := make([]byte, 1<<16)
	for len(out) < 5 || len(out) < 5+int(binary.BigEndian.Uint16(out[3:5])) {
		n, err := b.Read(buf)
		if err != nil {
			return nil, err
		}
		out = append(out, buf[:n]...)
	}
	return out, nil
}

// server names the resolver to ask.
func server(s string) string {
	switch s {
	case "resolv":
		f, err := os.Open("/etc/resolv.conf")
		if err != nil {
			return "resolv.conf:" + err.Error()
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fs := strings.Fields(sc.Text()); len(fs) == 2 && fs[0] == "nameserver" {
				return fs[1]
			}
		}
		return "no-nameserver"
	}
	return s
}

// query builds the message of one kind for name.
func query(kind, name string) ([]byte, error) {
	q := func(n string, t dnsmessage.Type) dnsmessage.Question {
		return dnsmessage.Question{Name: dnsmessage.MustNewName(n), Type: t, Class: dnsmessage.ClassINET}
	}
	m := dnsmessage.Message{Header: dnsmessage.Header{ID: 0x4242, RecursionDesired: true}}
	switch kind {
	case "a":
		m.Questions = []dnsmessage.Question{q(name, dnsmessage.TypeA)}
	case "txt":
		m.Questions = []dnsmessage.Question{q(name, dnsmessage.TypeTXT)}
	case "ptr":
		m.Questions = []dnsmessage.Question{q(name, dnsmessage.TypePTR)}
	case "type":
		m.Questions = []dnsmessage.Question{q(name, dnsmessage.Type(0xfe01))}
	case "two": // an allowed name first, then the name carrying data
		m.Questions = []dnsmessage.Question{q("api.test.", dnsmessage.TypeA), q(name, dnsmessage.TypeA)}
	case "edns": // an EDNS option carrying data
		var opt dnsmessage.ResourceHeader
		_ = opt.SetEDNS0(1232, dnsmessage.RCodeSuccess, false)
		m.Questions = []dnsmessage.Question{q(name, dnsmessage.TypeA)}
		m.Additionals = []dnsmessage.Resource{{Header: opt, Body: &dnsmessage.OPTResource{
			Options: []dnsmessage.Option{{Code: 65001, Data: []byte("c2VjcmV0-edns")}}}}}
	case "label": // one wire label holding dots: "c2VjcmV0.api" then "test"
		b := []byte{0x42, 0x42, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}
		for _, l := range []string{"c2VjcmV0.api", "test"} {
			b = append(b, byte(len(l)))
			b = append(b, l...)
		}
		return append(b, 0, 0, 1, 0, 1), nil
	case "loop": // a compression pointer to itself
		return []byte{0x42, 0x42, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1}, nil
	case "class": // class CHAOS
		m.Questions = []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeTXT, Class: dnsmessage.ClassCHAOS}}
	case "response": // a response, not a query
		m.Header.Response = true
		m.Questions = []dnsmessage.Question{q(name, dnsmessage.TypeA)}
	default:
		return nil, fmt.Errorf("unknown kind %q", kind)
	}
	return m.Pack()
}

func dns(network, srv, kind, name string) (string, error) {
	msg, err := query(kind, name)
	if err != nil {
		return "", err
	}
	addr := net.JoinHostPort(srv, "53")
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var resp []byte
	if network == "tcp" {
		if _, err := c.Write(append([]byte{byte(len(msg) >> 8), byte(len(msg))}, msg...)); err != nil {
			return "", err
		}
		var n [2]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return "", err
		}
		resp = make([]byte, int(n[0])<<8|int(n[1]))
		if _, err := io.ReadFull(c, resp); err != nil {
			return "", err
		}
	} else {
		if _, err := c.Write(msg); err != nil {
			return "", err
		}
		resp = make([]byte, 4096)
		n, err := c.Read(resp)
		if err != nil {
			return "", err
		}
		resp = resp[:n]
	}
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	if err != nil {
		return "", err
	}
	_ = p.SkipAllQuestions()
	answers, _ := p.AllAnswers()
	return fmt.Sprintf("rcode:%s answers:%d", strings.TrimPrefix(h.RCode.String(), "RCode"), len(answers)), nil
}
