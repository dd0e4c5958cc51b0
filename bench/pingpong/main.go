// Command pingpong measures what a FUSE request costs at least on a
// machine: a system call, and a round trip between two processes (the
// client's request wakes the daemon, the daemon's reply wakes the
// client), here over two pipes. docs/BENCHMARKS.md ("The FUSE floor")
// compares these with the write table's rows.
//
//	go run ./bench/pingpong
//	taskset -c 0 go run ./bench/pingpong   # both processes on one CPU
package main

import (
	"fmt"
	"log"
	"os"
	"os/exec"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		echo()
		return
	}
	const n = 20000
	start := time.Now()
	for range 10 * n {
		syscall.Getppid()
	}
	perCall := time.Since(start) / (10 * n)

	r1, w1, err := os.Pipe()
	if err != nil {
		log.Fatal(err)
	}
	r2, w2, err := os.Pipe()
	if err != nil {
		log.Fatal(err)
	}
	child := exec.Command(os.Args[0], "child")
	child.ExtraFiles = []*os.File{r1, w2} // fds 3 and 4
	if err := child.Start(); err != nil {
		log.Fatal(err)
	}
	b := make([]byte, 1)
	trip := func() {
		if _, err := w1.Write(b); err != nil {
			log.Fatal(err)
		}
		if _, err := r2.Read(b); err != nil {
			log.Fatal(err)
		}
	}
	for range 1000 { // warm up
		trip()
	}
	start = time.Now()
	for range n {
		trip()
	}
	perTrip := time.Since(start) / n
	w1.Close()
	if err := child.Wait(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("system call (getppid) %v, process round trip over pipes %v\n", perCall, perTrip)
}

// echo answers each byte read from fd 3 on fd 4, until fd 3 closes.
func echo() {
	in, out := os.NewFile(3, "in"), os.NewFile(4, "out")
	b := make([]byte, 1)
	for {
		if _, err := in.Read(b); err != nil {
			return
		}
		if _, err := out.Write(b); err != nil {
			return
		}
	}
}
