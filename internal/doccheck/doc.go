// Package doccheck holds the tests that keep the docs true to the code: every Go name and file
// path that the docs (README.md, docs/*.md) and the code's comments point at still exists, every
// package has a doc comment, the README's Layout table names every package, and every ```go block
// of the docs compiles against the module as it is. A rename that leaves a comment, a page or a
// snippet naming the old identifier fails the unit stage, with the place and the name.
package doccheck
