// A loopback HTTP service that answers every request after a fixed delay: the network call of
// bench.concurrency's callbacks (goka-py's and parallel-consumer's alike). Standard library only.
//
//	slowhttp -delay 10ms
//
// It listens on 127.0.0.1 on a free port and prints `listening <port>` once. GET /score?key=K
// answers `K <n>` (n: requests answered so far) after the delay; GET /stats answers
// `answered=<n> most_in_flight=<m> first_ms=<unix ms of the first request>
// others_answered=<n> others_last_ms=<unix ms>` (the requests of keys other than the -hot
// one, and when the last of them was answered); GET /reset answers `in_flight=<n>` (requests
// being answered) and sets the others to 0. It runs until its standard input closes.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

func main() {
	delay := flag.Duration("delay", 10*time.Millisecond, "how long each answer waits")
	hot := flag.String("hot", "hot-key", "the key the others_ figures leave out")
	flag.Parse()
	var answered, inFlight, most, first, others, othersLast atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/score", func(w http.ResponseWriter, r *http.Request) {
		first.CompareAndSwap(0, time.Now().UnixMilli())
		now := inFlight.Add(1)
		for {
			seen := most.Load()
			if now <= seen || most.CompareAndSwap(seen, now) {
				break
			}
		}
		time.Sleep(*delay)
		inFlight.Add(-1)
		n := answered.Add(1)
		key := r.URL.Query().Get("key")
		if key != *hot {
			others.Add(1)
			for { // (the latest answer's time: answers end out of order)
				at, seen := time.Now().UnixMilli(), othersLast.Load()
				if at <= seen || othersLast.CompareAndSwap(seen, at) {
					break
				}
			}
		}
		fmt.Fprintf(w, "%s %d", key, n)
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "answered=%d most_in_flight=%d first_ms=%d others_answered=%d "+
			"others_last_ms=%d", answered.Load(), most.Load(), first.Load(), others.Load(),
			othersLast.Load())
	})
	mux.HandleFunc("/reset", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "in_flight=%d", inFlight.Load())
		first.Store(0)
		most.Store(0)
		answered.Store(0)
		others.Store(0)
		othersLast.Store(0)
	})
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("listening %d\n", listener.Addr().(*net.TCPAddr).Port)
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	server := &http.Server{Handler: mux, MaxHeaderBytes: 1 << 14}
	if err := server.Serve(listener); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
