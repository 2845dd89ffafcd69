package main

// join.c moves a `kubelet-ns --join=PID` process into the mount and PID namespaces of a
// real-runtime node's init before the Go runtime starts: a multi-threaded process can
// neither enter a mount namespace nor create threads after entering a PID namespace, so
// this has to happen in C, in a constructor, and the Go program goes on in a child.

// #cgo CFLAGS: -Wall -Werror
import "C"
