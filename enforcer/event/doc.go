// Package event defines what the kernel side reports to the decision side:
// one observed operation of an agent process, already mapped to a KLIS
// triple, with who did it and what the kernel answered. Backends produce
// Events; the decision engine and the verification log consume them. This
// package has no behaviour and no kernel code.
package event
