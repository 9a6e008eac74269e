"""The SQL subset: grammar, parser to the statement AST of ast.py."""
