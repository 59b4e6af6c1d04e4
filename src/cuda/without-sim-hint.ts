/**
 * The native layer's reasons end with CLI advice ("… or use the simulated
 * driver (--driver sim)"): wrong for a library caller, and wrong for anyone
 * already on the simulator. Library messages say it their own way
 * (open-driver.ts), so the reason goes without it.
 */
export function withoutSimHint(reason: string): string {
  return reason
    .replace(/;? *(?:or )?use the simulated driver \(--driver sim\)/g, '')
    .replace(/ (?:or|and)$/, '')
    .trim();
}
