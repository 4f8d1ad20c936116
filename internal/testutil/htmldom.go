package testutil

import (
	"strings"

	"golang.org/x/net/html"
)

// The HTML report's tests read a page as a DOM (the unit tests parse what
// the template wrote; the end-to-end test, what Chromium built): these
// walk one.

// HTMLWalk calls f on n and every node below it, in document order.
func HTMLWalk(n *html.Node, f func(*html.Node)) {
	f(n)
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		HTMLWalk(c, f)
	}
}

// HTMLAttr is n's attribute key.
func HTMLAttr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

// HTMLByID is the first element below n with that id; nil when none.
func HTMLByID(n *html.Node, id string) *html.Node {
	var found *html.Node
	HTMLWalk(n, func(c *html.Node) {
		if v, ok := HTMLAttr(c, "id"); ok && v == id && found == nil {
			found = c
		}
	})
	return found
}

// HTMLText is the text below n, as a reader (or a screen reader) gets it.
func HTMLText(n *html.Node) string {
	if n == nil {
		return ""
	}
	var b strings.Builder
	HTMLWalk(n, func(c *html.Node) {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	})
	return b.String()
}
