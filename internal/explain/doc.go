// Package explain renders a validated manifest for people: seed 002's
// permissions matrix, the intents as compiled (baseline included), the
// lethal-trifecta and HITL verdict, the cost envelope and grants. It reads a
// *policy.Manifest and never changes it.
package explain
