from skipcore.commands import cli

cli()
