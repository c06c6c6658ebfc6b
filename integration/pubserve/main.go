// Command pubserve is the server inside the sandbox of the published-port
// tests: a line echo over TCP and a datagram echo over UDP on the port
// given, on every address (0.0.0.0), each answer prefixed with "echo:".
// It prints "ready" once both listen and serves until its stdin closes.
// A second argument is the address to listen on instead (127.0.0.1).
package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
)

func main() {
	if len(os.Args) != 2 && len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: pubserve PORT [ADDR]")
		os.Exit(2)
	}
	addr := "0.0.0.0"
	if len(os.Args) == 3 {
		addr = os.Args[2]
	}
	ln, err := net.Listen("tcp4", addr+":"+os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pc, err := net.ListenPacket("udp4", addr+":"+os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, "echo:"+line); err != nil {
						return
					}
				}
			}()
		}
	}()
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte("echo:"), buf[:n]...), from)
		}
	}()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
}
