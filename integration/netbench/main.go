// Command netbench is the client side of BenchmarkJailNetwork: it runs
// inside a sandbox (the jail, pasta, slirp4netns, or none) and measures
// the sandbox's egress path against the servers the benchmark runs in the
// lab's "world" namespace. It is never shipped.
//
// Usage: netbench STEP [STEP...], where each STEP is one of
//
//	up ADDR BYTES SECS     send to a sink until BYTES or SECS; prints "up GBITS"
//	down ADDR BYTES SECS   read from a source until BYTES or SECS; prints "down GBITS"
//	rr ADDR N              N 1-byte TCP request/responses; prints "rr MEAN_US P50_US"
//	cps ADDR N             N connect, read 1-byte greeting, close; prints
//	                       "cps ADDR CONN_PER_S FAILED P50_US P99_US MAX_US"
//	cpse ADDR N            N connect, send a zero byte, read its echo, close
//	                       (the client speaks first); prints as cps does
//	udprr ADDR N           N 8-byte UDP request/responses; prints "udprr MEAN_US P50_US LOST"
//	idle MS                prints "ready", then sleeps MS milliseconds
//
// Steps run in order, each printing one line on stdout; a failing step
// prints "STEP err: ..." on stdout, the next steps still run, and the
// command exits 1 at the end.
package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"time"
)

const chunk = 256 << 10

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: netbench STEP [STEP...]")
		os.Exit(2)
	}
	arity := map[string]int{"up": 3, "down": 3, "rr": 2, "cps": 2, "cpse": 2, "udprr": 2, "idle": 1}
	failed := false
	for len(args) > 0 {
		name := args[0]
		n, ok := arity[name]
		if !ok || len(args) < 1+n {
			fmt.Fprintf(os.Stderr, "netbench: bad step %q\n", args)
			os.Exit(2)
		}
		out, err := step(name, args[1:1+n])
		if err != nil {
			fmt.Printf("%s err: %v\n", name, err)
			failed = true
		} else {
			fmt.Println(name + " " + out)
		}
		args = args[1+n:]
	}
	if failed {
		os.Exit(1)
	}
}

func step(name string, a []string) (string, error) {
	switch name {
	case "idle":
		ms, err := strconv.Atoi(a[0])
		if err != nil {
			return "", err
		}
		fmt.Println("ready")
		time.Sleep(time.Duration(ms) * time.Millisecond)
		return "done", nil
	case "up", "down":
		bytes, err := strconv.ParseInt(a[1], 10, 64)
		if err != nil {
			return "", err
		}
		secs, err := strconv.ParseFloat(a[2], 64)
		if err != nil {
			return "", err
		}
		limit := time.Duration(secs * float64(time.Second))
		var got int64
		var d time.Duration
		if name == "up" {
			got, d, err = up(a[0], bytes, limit)
		} else {
			got, d, err = down(a[0], bytes, limit)
		}
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%.3f", float64(got)*8/d.Seconds()/1e9), nil
	}
	n, err := strconv.Atoi(a[1])
	if err != nil || n <= 0 {
		return "", fmt.Errorf("bad count %q", a[1])
	}
	switch name {
	case "rr":
		return rr(a[0], n)
	case "cps":
		return cps(a[0], n, false)
	case "cpse":
		return cps(a[0], n, true)
	default:
		return udprr(a[0], n)
	}
}

// up writes to a sink until bytes are sent or limit passes, half-closes,
// and waits for the sink's count of what arrived (8 bytes, big endian).
func up(addr string, bytes int64, limit time.Duration) (int64, time.Duration, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	buf := make([]byte, chunk)
	t0 := time.Now()
	_ = c.SetDeadline(t0.Add(limit + 30*time.Second))
	var sent int64
	for sent < bytes && time.Since(t0) < limit {
		n, err := c.Write(buf[:min(int64(len(buf)), bytes-sent)])
		sent += int64(n)
		if err != nil {
			return 0, 0, err
		}
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return 0, 0, err
	}
	var cnt [8]byte
	if _, err := io.ReadFull(c, cnt[:]); err != nil {
		return 0, 0, fmt.Errorf("sink's count: %w", err)
	}
	d := time.Since(t0)
	got := int64(binary.BigEndian.Uint64(cnt[:]))
	if got != sent {
		return 0, 0, fmt.Errorf("sent %d, sink got %d", sent, got)
	}
	return got, d, nil
}

// down asks a source for bytes and reads until they all arrived or limit
// passes.
func down(addr string, bytes int64, limit time.Duration) (int64, time.Duration, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], uint64(bytes))
	t0 := time.Now()
	if _, err := c.Write(req[:]); err != nil {
		return 0, 0, err
	}
	_ = c.SetReadDeadline(t0.Add(limit))
	buf := make([]byte, chunk)
	var got int64
	for got < bytes {
		n, err := c.Read(buf)
		got += int64(n)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			break
		}
		if err != nil {
			return 0, 0, err
		}
	}
	return got, time.Since(t0), nil
}

func stats(ds []time.Duration) string {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	slices.Sort(ds)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return fmt.Sprintf("%.2f %.2f", us(sum)/float64(len(ds)), us(ds[len(ds)/2]))
}

// rr does n 1-byte round trips on one connection to an echo server, after
// a short warm-up.
func rr(addr string, n int) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	b := []byte{'x'}
	ds := make([]time.Duration, 0, n)
	for i := -n / 10; i < n; i++ {
		t := time.Now()
		if _, err := c.Write(b); err != nil {
			return "", err
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return "", err
		}
		if i >= 0 {
			ds = append(ds, time.Since(t))
		}
	}
	return stats(ds), nil
}

// cps opens n connections one after the other; each reads the server's
// 1-byte greeting (so the connection reached the server, not just a
// proxy) and closes. Which side closes first is the server's choice. A
// connection not established within a second counts as failed; after
// maxFailed failures the step stops and reports what it did.
func cps(addr string, n int, echo bool) (string, error) {
	const maxFailed = 5
	b := make([]byte, 1)
	t0 := time.Now()
	done, failed := 0, 0
	ds := make([]time.Duration, 0, n)
	for done < n && failed < maxFailed {
		t := time.Now()
		c, err := net.DialTimeout("tcp", addr, time.Second)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			failed++
			continue
		}
		if err != nil {
			return "", fmt.Errorf("connection %d: %w", done, err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if echo {
			b[0] = 0 // no TLS or HTTP prefix: nothing for a peek to wait for
			if _, err = c.Write(b); err != nil {
				c.Close()
				return "", fmt.Errorf("connection %d: %w", done, err)
			}
		}
		_, err = io.ReadFull(c, b)
		c.Close()
		if err != nil {
			return "", fmt.Errorf("connection %d: %w", done, err)
		}
		ds = append(ds, time.Since(t))
		done++
	}
	slices.Sort(ds)
	q := func(f float64) float64 { return float64(ds[int(f*float64(len(ds)-1))].Microseconds()) }
	return fmt.Sprintf("%s %.1f %d %.0f %.0f %.0f", addr, float64(done)/time.Since(t0).Seconds(), failed, q(0.5), q(0.99), q(1)), nil
}

// udprr does n round trips of an 8-byte sequence number with a UDP echo
// server; a datagram not answered within 200 ms counts as lost.
func udprr(addr string, n int) (string, error) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	var req [8]byte
	resp := make([]byte, 64)
	ds := make([]time.Duration, 0, n)
	lost := 0
	for i := -n / 10; i < n; i++ {
		binary.BigEndian.PutUint64(req[:], uint64(i))
		t := time.Now()
		if _, err := c.Write(req[:]); err != nil {
			return "", err
		}
		_ = c.SetReadDeadline(t.Add(200 * time.Millisecond))
		for {
			m, err := c.Read(resp)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				lost++
				break
			}
			if err != nil {
				return "", err
			}
			if m == 8 && binary.BigEndian.Uint64(resp[:8]) == uint64(i) {
				if i >= 0 {
					ds = append(ds, time.Since(t))
				}
				break
			}
		}
		if lost > n/10 {
			return "", fmt.Errorf("%d datagrams lost", lost)
		}
	}
	if len(ds) == 0 {
		return "", errors.New("no answers")
	}
	return stats(ds) + " " + strconv.Itoa(lost), nil
}
